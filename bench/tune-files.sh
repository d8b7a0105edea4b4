# Sourced by the tune benches: `snapshot` prints every file rtlab tune may touch on this
# machine with its content, one per line, so two snapshots can be compared with diff.
snapshot() {
  for f in /proc/sys/kernel/sched_rt_runtime_us /sys/kernel/mm/transparent_hugepage/enabled \
           /proc/irq/*/smp_affinity_list /sys/kernel/mm/damon/admin/kdamonds/*/state \
           /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor \
           /sys/devices/system/cpu/cpu*/cpuidle/state*/disable; do
    [ -r "$f" ] && printf '%s\t%s\n' "$f" "$(cat "$f")"
  done
  return 0
}
