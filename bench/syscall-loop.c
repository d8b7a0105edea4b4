// The cost of one cheap system call (getppid), for bench/watch-locks.sh: calls it in batches
// of 1000 for SECONDS and prints the mean ns per call. Usage: syscall-loop [SECONDS]
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 1;
    long long start = now_ns(), end = start + (long long)(seconds * 1e9), n = 0;
    while (now_ns() < end) {
        for (int i = 0; i < 1000; i++) syscall(SYS_getppid);
        n += 1000;
    }
    printf("%.1f\n", (double)(now_ns() - start) / n);
    return 0;
}
