/*
 * rtlab.h: rtlab's real-time primitives for C (librtlab.so / librtlab.a).
 *
 *   cargo build --release            # target/release/librtlab.so and librtlab.a
 *   cc -O2 app.c -I include -L target/release -lrtlab -Wl,-rpath,$PWD/target/release
 *   cc -O2 app.c -I include target/release/librtlab.a -lpthread -ldl -lm   # static
 *
 * Every function returns 0 on success or a positive errno-style code (RTLAB_E*;
 * rtlab_strerror names it). Pointers are checked for null and alignment (RTLAB_EINVAL); no
 * Rust panic crosses into C (RTLAB_EINTERNAL). Deadlines are absolute CLOCK_MONOTONIC
 * nanoseconds (rtlab_now_ns() + a timeout), RTLAB_FOREVER for none.
 *
 * Objects live in the caller's memory: in its own structs, on the heap, or in MAP_SHARED
 * memory between processes. Each has the size and alignment below; rtlab_*_init writes a
 * fresh one in place (never on one in use). Objects are not moved or copied while in use.
 *
 * MIT OR Apache-2.0.
 */
#ifndef RTLAB_H
#define RTLAB_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Codes (Linux errno values, except RTLAB_EINTERNAL). */
#define RTLAB_EINVAL 22          /* a null or misaligned pointer, a bad value */
#define RTLAB_EBUSY 16           /* held by another thread (trylock); a channel end in use */
#define RTLAB_EOWNERDEAD 130     /* robust: the owner died; the caller holds it now: repair */
#define RTLAB_ENOTRECOVERABLE 131 /* robust: unlocked after an owner died, not repaired */
#define RTLAB_ETIMEDOUT 110      /* the deadline passed */
#define RTLAB_EPEERDIED 32       /* channel: the process at the other end died (EPIPE) */
#define RTLAB_ECORRUPT 74        /* channel: shared memory this side cannot trust (EBADMSG) */
#define RTLAB_EDEADLK 35         /* the calling thread already holds the lock */
#define RTLAB_EPERM 1            /* not the owner (unlock, repair); no privilege */
#define RTLAB_EMSGSIZE 90        /* channel: message longer than the maximum */
#define RTLAB_ENOBUFS 105        /* channel: buffer smaller than the message (*len = its size) */
#define RTLAB_ENOENT 2           /* channel: no channel of that name */
#define RTLAB_ENOTSUP 95         /* the kernel lacks what the call needs */
#define RTLAB_ERANGE 34          /* a text did not fit the buffer */
#define RTLAB_EIO 5              /* another failure of the system */
#define RTLAB_EINTERNAL 4096     /* a bug in rtlab (a caught panic) */

#define RTLAB_FOREVER UINT64_MAX /* a deadline that never comes */

/* Sizes and alignments of the objects. */
#define RTLAB_PI_MUTEX_SIZE 8
#define RTLAB_PI_MUTEX_ALIGN 4
#define RTLAB_ROBUST_MUTEX_SIZE 64
#define RTLAB_ROBUST_MUTEX_ALIGN 64
#define RTLAB_PI_COND_SIZE 16
#define RTLAB_PI_COND_ALIGN 8
#define RTLAB_PARKER_SIZE 8
#define RTLAB_PARKER_ALIGN 4

#ifdef __cplusplus
#define RTLAB_ALIGNAS(n) alignas(n)
#else
#define RTLAB_ALIGNAS(n) _Alignas(n)
#endif
typedef struct { RTLAB_ALIGNAS(RTLAB_PI_MUTEX_ALIGN) unsigned char opaque[RTLAB_PI_MUTEX_SIZE]; } rtlab_pi_mutex_t;
typedef struct { RTLAB_ALIGNAS(RTLAB_ROBUST_MUTEX_ALIGN) unsigned char opaque[RTLAB_ROBUST_MUTEX_SIZE]; } rtlab_robust_mutex_t;
typedef struct { RTLAB_ALIGNAS(RTLAB_PI_COND_ALIGN) unsigned char opaque[RTLAB_PI_COND_SIZE]; } rtlab_pi_cond_t;
typedef struct { RTLAB_ALIGNAS(RTLAB_PARKER_ALIGN) unsigned char opaque[RTLAB_PARKER_SIZE]; } rtlab_parker_t;
/* A channel handle (opaque; from rtlab_channel_create/open, until rtlab_channel_close). */
typedef struct rtlab_channel rtlab_channel_t;

/* ---- time and threads (each acts on the calling thread) ---- */
uint64_t rtlab_now_ns(void);                    /* CLOCK_MONOTONIC, ns */
int64_t rtlab_gettid(void);
int rtlab_thread_set_fifo(int prio);            /* SCHED_FIFO 1-99; RTLAB_EPERM without privilege */
int rtlab_thread_set_scheduler(int policy, int prio); /* 0 OTHER (prio 0), 1 FIFO, 2 RR (1-99) */
int rtlab_thread_set_affinity(const int *cpus, size_t n);
int rtlab_thread_set_timer_slack_ns(uint64_t ns); /* 1 ns: timed sleeps wake on time */
int rtlab_mlockall(void);                        /* mlockall(MCL_CURRENT | MCL_FUTURE) */
/* What this kernel supports, as text ("pi_futex=1 lock_pi2=1 requeue_pi=1 robust_list=1\n",
 * then one line per missing feature), NUL-terminated; RTLAB_ERANGE when truncated. */
int rtlab_probe(char *buf, size_t cap);
const char *rtlab_strerror(int code);           /* static text */

/* ---- priority-inheritance mutex (FUTEX_LOCK_PI): while a thread waits, the holder runs at
 * the waiter's priority. The uncontended lock and unlock stay in user space. shared != 0 for
 * one in MAP_SHARED memory used by several processes. ---- */
int rtlab_pi_mutex_init(rtlab_pi_mutex_t *m, int shared);
int rtlab_pi_mutex_lock(rtlab_pi_mutex_t *m);   /* RTLAB_EDEADLK if already held by the caller */
int rtlab_pi_mutex_trylock(rtlab_pi_mutex_t *m); /* RTLAB_EBUSY when held */
int rtlab_pi_mutex_lock_until(rtlab_pi_mutex_t *m, uint64_t deadline_ns); /* RTLAB_ETIMEDOUT */
int rtlab_pi_mutex_unlock(rtlab_pi_mutex_t *m); /* RTLAB_EPERM if the caller does not hold it */

/* ---- robust PI mutex, always process-shared: when its holder dies, the next locker gets
 * RTLAB_EOWNERDEAD and holds it; it repairs the data, then calls make_consistent before
 * unlocking (unlocking without that makes it RTLAB_ENOTRECOVERABLE for everyone). A thread
 * holds at most 32 at once. ---- */
int rtlab_robust_mutex_init(rtlab_robust_mutex_t *m);
int rtlab_robust_mutex_lock(rtlab_robust_mutex_t *m);
int rtlab_robust_mutex_lock_until(rtlab_robust_mutex_t *m, uint64_t deadline_ns);
int rtlab_robust_mutex_make_consistent(rtlab_robust_mutex_t *m);
int rtlab_robust_mutex_unlock(rtlab_robust_mutex_t *m);

/* ---- PI condition variable (requeue-PI): a signal hands the mutex to the highest-priority
 * waiter, with priority inheritance. All waiters of one condition variable use the same
 * rtlab_pi_mutex_t of the same scope; a shared pair lives in one shared mapping (the
 * condition variable remembers where its mutex is, relative to itself). Waits return
 * holding the mutex, also on RTLAB_ETIMEDOUT; a return may be spurious: re-check. A signal
 * or broadcast returns RTLAB_ECORRUPT when that remembered place was overwritten (the kernel
 * finds the waiters waiting for another mutex, or no memory there): nobody was woken. ---- */
int rtlab_pi_cond_init(rtlab_pi_cond_t *c, int shared);
int rtlab_pi_cond_wait_until(rtlab_pi_cond_t *c, rtlab_pi_mutex_t *m, uint64_t deadline_ns);
int rtlab_pi_cond_signal(rtlab_pi_cond_t *c);
int rtlab_pi_cond_broadcast(rtlab_pi_cond_t *c);

/* ---- parker: one thread parks until an absolute deadline or an unpark (a token: an unpark
 * before the park makes it return at once). ---- */
int rtlab_parker_init(rtlab_parker_t *p);        /* for threads of one process */
int rtlab_parker_init_shared(rtlab_parker_t *p); /* for MAP_SHARED memory */
int rtlab_parker_park_until(rtlab_parker_t *p, uint64_t deadline_ns); /* 0 unparked, RTLAB_ETIMEDOUT */
int rtlab_parker_unpark(rtlab_parker_t *p);

/* ---- shared-memory channel between two processes (/dev/shm/<name>): one sending process,
 * one receiving one, each using its end from one thread at a time. capacity: ring bytes
 * (a power of two, at least 4096; a message takes at most a quarter). The creator's close
 * removes the name. A dead peer is RTLAB_EPEERDIED within the deadline. ---- */
int rtlab_channel_create(const char *name, uint32_t capacity, rtlab_channel_t **out);
int rtlab_channel_open(const char *name, rtlab_channel_t **out);
size_t rtlab_channel_max_message(rtlab_channel_t *ch);
int rtlab_channel_send(rtlab_channel_t *ch, const void *buf, size_t len, uint64_t deadline_ns);
int rtlab_channel_recv(rtlab_channel_t *ch, void *buf, size_t cap, size_t *len,
                       uint64_t deadline_ns);
void rtlab_channel_close(rtlab_channel_t *ch);

/* ---- for language bindings that send or receive in their own code, without a call per
 * message (the Java binding does): the ring's layout and protocol
 * (crates/rtlab-ipc/src/ring/mod.rs documents it). rtlab_channel_layout attaches this process's `end` and fills up to
 * n of RTLAB_CHANNEL_LAYOUT_WORDS words: format (use the fast path only when it is
 * RTLAB_CHANNEL_FORMAT), spsc, base address, mapping length, magic, capacity, max message,
 * then the offsets of the ring, head, tail, the consumer's and the producer's waiting flags,
 * and 1 when a consumer reads the producer's waiting flag after storing tail with no fence
 * between (the producer's side makes its CPU fence with membarrier; 0: fence there).
 * rtlab_channel_wake: after publishing (RTLAB_CHANNEL_SEND) or consuming (RTLAB_CHANNEL_RECV)
 * a record that way, wakes the other end if it sleeps. ---- */
#define RTLAB_CHANNEL_SEND 1
#define RTLAB_CHANNEL_RECV 2
#define RTLAB_CHANNEL_LAYOUT_WORDS 13
#define RTLAB_CHANNEL_FORMAT 4
int rtlab_channel_layout(rtlab_channel_t *ch, int end, uint64_t *words, size_t n);
int rtlab_channel_wake(rtlab_channel_t *ch, int end);

#ifdef __cplusplus
}
#endif

#endif /* RTLAB_H */
