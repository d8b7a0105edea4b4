// Noticed while building examples/java/Inversion.java (2026-11-23, kernel 6.18.44 on this
// 2-vCPU VM), left for a later look: a PI-boosted holder can be kept off its CPU by a thread
// that was SCHED_OTHER when the boost began and made itself SCHED_FIFO (below the boost)
// afterwards. low (FIFO 10) holds an rtlab PI mutex on CPU 0, high (FIFO 30) waits for it (low
// runs at FIFO 30), then medium is created, moves itself to CPU 0 and sets SCHED_FIFO 20, and
// spins 200 ms: low makes no progress until medium is done (printed: its hold starts ~200 ms
// late). With medium made FIFO 20 before the lock is contended, low finishes in its 5 ms.
// Suspect: the fair server (SCHED_DEADLINE server for CFS tasks, 6.12+) that ran medium while
// it was still SCHED_OTHER. Needs root and two CPUs.
//
//   cargo build --release
//   cc -O2 -pthread -I include -o /tmp/repro bench/repro/pi-boost-vs-setscheduler.c
//      -L target/release -lrtlab -Wl,-rpath,$PWD/target/release && sudo /tmp/repro  (one line)
#define _GNU_SOURCE
#include "rtlab.h"
#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <unistd.h>
static rtlab_pi_mutex_t m; static atomic_int held, go, waiting; static uint64_t waited, holdstart, holdend, t0;
static void spin(uint64_t ns){ uint64_t e=rtlab_now_ns()+ns; while(rtlab_now_ns()<e); }
static void setup(int prio){ int c=0; rtlab_thread_set_affinity(&c,1); rtlab_thread_set_fifo(prio); }
static void *low(void*a){ (void)a; setup(10); rtlab_pi_mutex_lock(&m); held=1; while(!go); holdstart=rtlab_now_ns(); spin(5000000); holdend=rtlab_now_ns(); rtlab_pi_mutex_unlock(&m); return 0; }
static void *high(void*a){ (void)a; setup(30); waiting=1; t0=rtlab_now_ns(); rtlab_pi_mutex_lock(&m); waited=rtlab_now_ns()-t0; rtlab_pi_mutex_unlock(&m); return 0; }
static void *med(void*a){ (void)a; setup(20); spin(200000000); return 0; }
int main(void){ rtlab_pi_mutex_init(&m,0); int one=1; rtlab_thread_set_affinity(&one,1);
 for(int i=0;i<5;i++){ held=go=waiting=0; pthread_t a,b,c; pthread_create(&a,0,low,0); while(!held) usleep(100);
  pthread_create(&b,0,high,0); while(!waiting) usleep(100); usleep(1000); pthread_create(&c,0,med,0); usleep(1000); go=1;
  pthread_join(b,0); pthread_join(a,0); pthread_join(c,0);
  printf("waited %.1f ms (hold %.1f..%.1f)\n", waited/1e6, (holdstart-t0)/1e6, (holdend-t0)/1e6); sleep(1);} }
