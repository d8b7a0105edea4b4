// Exercises every function of include/rtlab.h from C, as a program outside the repository
// would: threads, priority inheritance, a robust mutex whose owner dies across fork, and a
// channel between two processes whose peer is killed. Prints "all N checks passed" and exits
// 0, or names the first failed check and exits 1. Run as root for the SCHED_FIFO checks
// (without root those say "skipped").
#define _GNU_SOURCE
#include "rtlab.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static int checks;

#define CHECK(cond)                                                                        \
    do {                                                                                   \
        checks++;                                                                          \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "abi_test.c:%d: check failed: %s\n", __LINE__, #cond);         \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)
#define EQ(a, b)                                                                           \
    do {                                                                                   \
        long long _a = (long long)(a), _b = (long long)(b);                                \
        checks++;                                                                          \
        if (_a != _b) {                                                                    \
            fprintf(stderr, "abi_test.c:%d: %s == %lld, expected %s == %lld\n", __LINE__,  \
                    #a, _a, #b, _b);                                                       \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

static const uint64_t MS = 1000000;
static int root;

static void *shared_memory(size_t len) {
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED);
    return p;
}

// ---- time, threads, probe ----
static void test_basics(void) {
    uint64_t a = rtlab_now_ns(), b = rtlab_now_ns();
    CHECK(a > 0 && b >= a);
    EQ(rtlab_gettid(), syscall(SYS_gettid));
    char text[512];
    EQ(rtlab_probe(text, sizeof text), 0);
    CHECK(strncmp(text, "pi_futex=1", 10) == 0);
    char tiny[4];
    EQ(rtlab_probe(tiny, sizeof tiny), RTLAB_ERANGE);
    EQ(strlen(tiny), 3);
    CHECK(strstr(rtlab_strerror(RTLAB_ETIMEDOUT), "timed out") != NULL);
    int cpu0 = 0;
    EQ(rtlab_thread_set_affinity(&cpu0, 1), 0);
    EQ(sched_getcpu(), 0);
    int bad = -1;
    EQ(rtlab_thread_set_affinity(&bad, 1), RTLAB_EINVAL);
    EQ(rtlab_thread_set_timer_slack_ns(1), 0);
    if (root) {
        EQ(rtlab_mlockall(), 0);
        munlockall();
    }
    cpu_set_t all;
    CPU_ZERO(&all);
    for (int i = 0; i < CPU_SETSIZE; i++) CPU_SET(i, &all);
    sched_setaffinity(0, sizeof all, &all);
}

// ---- PI mutex ----
static rtlab_pi_mutex_t pm;
static int other_result;

static void *try_from_other(void *arg) {
    (void)arg;
    other_result = rtlab_pi_mutex_trylock(&pm);
    if (other_result == RTLAB_EBUSY) other_result = rtlab_pi_mutex_lock_until(&pm, rtlab_now_ns() + 5 * MS);
    if (other_result == RTLAB_ETIMEDOUT) other_result = rtlab_pi_mutex_unlock(&pm) == RTLAB_EPERM ? 0 : -1;
    return NULL;
}

static void *fifo_waiter(void *arg) {
    (void)arg;
    int r = rtlab_thread_set_fifo(20);
    if (r == 0) r = rtlab_pi_mutex_lock(&pm);
    if (r == 0) r = rtlab_pi_mutex_unlock(&pm);
    other_result = r;
    return NULL;
}

// The calling thread's priority as /proc shows it (-21 for SCHED_FIFO 20, 20 for nice 0).
static int my_prio(void) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/thread-self/stat");
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    int field = 2, prio = 0;
    for (char *tok = strtok(p + 2, " "); tok; tok = strtok(NULL, " ")) {
        if (++field == 18) {
            prio = atoi(tok);
            break;
        }
    }
    return prio;
}

static void test_pi_mutex(void) {
    EQ(rtlab_pi_mutex_init(&pm, 0), 0);
    EQ(rtlab_pi_mutex_unlock(&pm), RTLAB_EPERM);
    EQ(rtlab_pi_mutex_lock(&pm), 0);
    EQ(rtlab_pi_mutex_lock(&pm), RTLAB_EDEADLK);
    pthread_t t;
    pthread_create(&t, NULL, try_from_other, NULL);
    pthread_join(t, NULL);
    EQ(other_result, 0);
    EQ(rtlab_pi_mutex_unlock(&pm), 0);
    EQ(rtlab_pi_mutex_trylock(&pm), 0);
    EQ(rtlab_pi_mutex_unlock(&pm), 0);
    EQ(rtlab_pi_mutex_lock_until(&pm, RTLAB_FOREVER), 0);
    EQ(rtlab_pi_mutex_unlock(&pm), 0);
    EQ(rtlab_pi_mutex_init(NULL, 0), RTLAB_EINVAL);
    EQ(rtlab_pi_mutex_lock((rtlab_pi_mutex_t *)((char *)&pm + 1)), RTLAB_EINVAL);
    if (!root) {
        printf("skipped: priority inheritance (needs SCHED_FIFO: run as root)\n");
        return;
    }
    // Priority inheritance: this SCHED_OTHER thread holds the lock; a FIFO 20 thread
    // waits for it; while it waits, the kernel runs this one at FIFO 20.
    int before = my_prio();
    EQ(rtlab_pi_mutex_lock(&pm), 0);
    pthread_create(&t, NULL, fifo_waiter, NULL);
    int boosted = before;
    for (int i = 0; i < 1000 && boosted == before; i++) {
        usleep(1000);
        boosted = my_prio();
    }
    EQ(boosted, -21);
    EQ(rtlab_pi_mutex_unlock(&pm), 0);
    pthread_join(t, NULL);
    EQ(other_result, 0);
    EQ(my_prio(), before);
}

// ---- PI condition variable ----
static rtlab_pi_mutex_t cm;
static rtlab_pi_cond_t cv;
static int ready, woken;

static void *cond_waiter(void *arg) {
    (void)arg;
    rtlab_pi_mutex_lock(&cm);
    ready++;
    while (woken == 0) {
        int r = rtlab_pi_cond_wait_until(&cv, &cm, rtlab_now_ns() + 5000 * MS);
        if (r == RTLAB_ETIMEDOUT) break;
    }
    woken++;
    rtlab_pi_mutex_unlock(&cm);
    return NULL;
}

static void test_cond(void) {
    EQ(rtlab_pi_mutex_init(&cm, 0), 0);
    EQ(rtlab_pi_cond_init(&cv, 0), 0);
    EQ(rtlab_pi_cond_signal(&cv), 0); // nobody waits yet
    EQ(rtlab_pi_mutex_lock(&cm), 0);
    uint64_t t0 = rtlab_now_ns();
    EQ(rtlab_pi_cond_wait_until(&cv, &cm, t0 + 2 * MS), RTLAB_ETIMEDOUT);
    CHECK(rtlab_now_ns() - t0 >= 2 * MS);
    EQ(rtlab_pi_mutex_unlock(&cm), 0); // held again after the timeout
    EQ(rtlab_pi_cond_wait_until(&cv, &cm, RTLAB_FOREVER), RTLAB_EPERM); // not held
    // Two waiters, woken by one broadcast (then by a signal each, if they raced it).
    pthread_t a, b;
    pthread_create(&a, NULL, cond_waiter, NULL);
    pthread_create(&b, NULL, cond_waiter, NULL);
    for (;;) {
        rtlab_pi_mutex_lock(&cm);
        int n = ready;
        rtlab_pi_mutex_unlock(&cm);
        if (n == 2) break;
        usleep(1000);
    }
    rtlab_pi_mutex_lock(&cm);
    woken = 1;
    EQ(rtlab_pi_cond_broadcast(&cv), 0);
    rtlab_pi_mutex_unlock(&cm);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    EQ(woken, 3);
    // A second mutex for the same condition variable is refused.
    rtlab_pi_mutex_t other;
    EQ(rtlab_pi_mutex_init(&other, 0), 0);
    EQ(rtlab_pi_mutex_lock(&other), 0);
    EQ(rtlab_pi_cond_wait_until(&cv, &other, rtlab_now_ns()), RTLAB_EINVAL);
    EQ(rtlab_pi_mutex_unlock(&other), 0);
    EQ(rtlab_pi_cond_signal(&cv), 0);
}

// ---- parker ----
static rtlab_parker_t parker;

static void *unparker(void *arg) {
    (void)arg;
    usleep(2000);
    rtlab_parker_unpark(&parker);
    return NULL;
}

static void test_parker(void) {
    EQ(rtlab_parker_init(&parker), 0);
    uint64_t t0 = rtlab_now_ns();
    EQ(rtlab_parker_park_until(&parker, t0 + 1 * MS), RTLAB_ETIMEDOUT);
    CHECK(rtlab_now_ns() >= t0 + 1 * MS);
    EQ(rtlab_parker_unpark(&parker), 0); // a token: the next park returns at once
    EQ(rtlab_parker_park_until(&parker, RTLAB_FOREVER), 0);
    pthread_t t;
    pthread_create(&t, NULL, unparker, NULL);
    EQ(rtlab_parker_park_until(&parker, rtlab_now_ns() + 5000 * MS), 0);
    pthread_join(t, NULL);
    rtlab_parker_t *shared = shared_memory(4096);
    EQ(rtlab_parker_init_shared(shared), 0);
    pid_t child = fork();
    if (child == 0) {
        usleep(2000);
        _exit(rtlab_parker_unpark(shared));
    }
    EQ(rtlab_parker_park_until(shared, rtlab_now_ns() + 5000 * MS), 0);
    int status;
    waitpid(child, &status, 0);
    EQ(WEXITSTATUS(status), 0);
}

// ---- robust mutex, its owner dying across fork ----
static void test_robust(void) {
    rtlab_robust_mutex_t *m = shared_memory(4096);
    EQ(rtlab_robust_mutex_init(m), 0);
    int *data = (int *)((char *)m + 1024);
    for (int round = 0; round < 2; round++) {
        pid_t child = fork();
        if (child == 0) {
            if (rtlab_robust_mutex_lock(m) != 0) _exit(2);
            *data = -1; // torn: the owner dies mid-update
            _exit(0);
        }
        int status;
        waitpid(child, &status, 0);
        EQ(WEXITSTATUS(status), 0);
        EQ(rtlab_robust_mutex_lock(m), RTLAB_EOWNERDEAD);
        EQ(*data, -1);
        if (round == 0) {
            *data = 0; // repaired
            EQ(rtlab_robust_mutex_make_consistent(m), 0);
            EQ(rtlab_robust_mutex_unlock(m), 0);
            EQ(rtlab_robust_mutex_lock(m), 0);
            EQ(rtlab_robust_mutex_unlock(m), 0);
        } else {
            EQ(rtlab_robust_mutex_unlock(m), 0); // without repair: unusable from now on
            EQ(rtlab_robust_mutex_lock(m), RTLAB_ENOTRECOVERABLE);
        }
    }
    EQ(rtlab_robust_mutex_init(m), 0);
    EQ(rtlab_robust_mutex_unlock(m), RTLAB_EPERM);
    EQ(rtlab_robust_mutex_lock_until(m, rtlab_now_ns() + MS), 0);
    EQ(rtlab_robust_mutex_make_consistent(m), 0);
    EQ(rtlab_robust_mutex_unlock(m), 0);
}

// ---- channel between two processes ----
static void test_channel(void) {
    char name[64];
    snprintf(name, sizeof name, "/rtlab-abi-test-%d", (int)getpid());
    rtlab_channel_t *ch = NULL;
    EQ(rtlab_channel_open(name, &ch), RTLAB_ENOENT);
    EQ(rtlab_channel_create(name, 8192, &ch), 0);
    CHECK(ch != NULL);
    EQ(rtlab_channel_max_message(ch), 2048);
    // The layout a binding polls the ring with (this process receives).
    uint64_t words[RTLAB_CHANNEL_LAYOUT_WORDS] = {0};
    EQ(rtlab_channel_layout(ch, RTLAB_CHANNEL_RECV, words, RTLAB_CHANNEL_LAYOUT_WORDS), 0);
    EQ(words[0], RTLAB_CHANNEL_FORMAT);
    EQ(words[1], 1); // spsc
    CHECK(words[2] != 0 && words[3] == words[7] + 8192); // the ring ends the mapping
    EQ(words[5], 8192);
    EQ(words[6], 2048);
    CHECK(words[12] == 0 || words[12] == 1); // how a full ring's producer is woken
    EQ(rtlab_channel_wake(ch, RTLAB_CHANNEL_RECV), 0); // nobody sleeps: nothing to do
    EQ(rtlab_channel_layout(ch, 0, words, 1), RTLAB_EINVAL);
    EQ(rtlab_channel_wake(ch, 3), RTLAB_EINVAL);
    pid_t child = fork();
    if (child == 0) {
        rtlab_channel_t *tx = NULL;
        if (rtlab_channel_open(name, &tx) != 0) _exit(2);
        for (int i = 0; i < 1000; i++) {
            char msg[100];
            int n = snprintf(msg, sizeof msg, "message %d", i);
            if (rtlab_channel_send(tx, msg, (size_t)n, rtlab_now_ns() + 5000 * MS) != 0) _exit(3);
        }
        char big[4096] = {0};
        if (rtlab_channel_send(tx, big, sizeof big, RTLAB_FOREVER) != RTLAB_EMSGSIZE) _exit(4);
        if (rtlab_channel_send(tx, "last", 4, RTLAB_FOREVER) != 0) _exit(5);
        pause(); // killed below
        _exit(6);
    }
    char buf[256];
    size_t len = 0;
    for (int i = 0; i < 1000; i++) {
        char want[100];
        int n = snprintf(want, sizeof want, "message %d", i);
        EQ(rtlab_channel_recv(ch, buf, sizeof buf, &len, rtlab_now_ns() + 5000 * MS), 0);
        EQ(len, n);
        CHECK(memcmp(buf, want, len) == 0);
    }
    EQ(rtlab_channel_recv(ch, buf, 2, &len, RTLAB_FOREVER), RTLAB_ENOBUFS);
    EQ(len, 4);
    EQ(rtlab_channel_recv(ch, buf, sizeof buf, &len, RTLAB_FOREVER), 0);
    CHECK(len == 4 && memcmp(buf, "last", 4) == 0);
    uint64_t t0 = rtlab_now_ns();
    EQ(rtlab_channel_recv(ch, buf, sizeof buf, &len, t0 + 2 * MS), RTLAB_ETIMEDOUT);
    // The sender is killed while this side waits: told within the deadline.
    kill(child, SIGKILL);
    int status;
    waitpid(child, &status, 0);
    t0 = rtlab_now_ns();
    EQ(rtlab_channel_recv(ch, buf, sizeof buf, &len, t0 + 2000 * MS), RTLAB_EPEERDIED);
    CHECK(rtlab_now_ns() - t0 < 2000 * MS);
    // A second creator of a name in use is refused; the creator's close removes it.
    rtlab_channel_t *again = NULL;
    EQ(rtlab_channel_create(name, 8192, &again), RTLAB_EBUSY);
    rtlab_channel_close(ch);
    EQ(rtlab_channel_open(name, &again), RTLAB_ENOENT);
    EQ(rtlab_channel_create("bad/name", 8192, &again), RTLAB_EINVAL);
    rtlab_channel_close(NULL);
}

int main(void) {
    root = geteuid() == 0;
    test_basics();
    test_pi_mutex();
    test_cond();
    test_parker();
    test_robust();
    test_channel();
    printf("all %d checks passed\n", checks);
    return 0;
}
