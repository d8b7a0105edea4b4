// One end of an rtlab channel, in C, for a peer written in another language (the Java
// binding's tests use it). Usage:
//   channel_peer send NAME N   opens NAME, sends "msg 0" .. "msg N-1", then waits to be killed
//   channel_peer recv NAME N   opens NAME, receives N messages and checks each, then waits for
//                              the next: prints "peer died" and exits 0 when the sender is
//                              gone (RTLAB_EPEERDIED), exits 1 on anything else.
//
//   cc -O2 -I include -o channel_peer examples/c/channel_peer.c -L target/release -lrtlab
//      -Wl,-rpath,$PWD/target/release     (one command line)
#include "rtlab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const uint64_t SECOND = 1000000000ull;

int main(int argc, char **argv) {
    if (argc != 4 || (strcmp(argv[1], "send") != 0 && strcmp(argv[1], "recv") != 0)) {
        fprintf(stderr, "usage: channel_peer send|recv NAME N\n");
        return 2;
    }
    int n = atoi(argv[3]);
    rtlab_channel_t *ch = NULL;
    int rc = rtlab_channel_open(argv[2], &ch);
    if (rc != 0) {
        fprintf(stderr, "open %s: %s\n", argv[2], rtlab_strerror(rc));
        return 1;
    }
    char buf[256], want[64];
    if (argv[1][0] == 's') {
        for (int i = 0; i < n; i++) {
            int len = snprintf(buf, sizeof buf, "msg %d", i);
            rc = rtlab_channel_send(ch, buf, (size_t)len, rtlab_now_ns() + 10 * SECOND);
            if (rc != 0) {
                fprintf(stderr, "send %d: %s\n", i, rtlab_strerror(rc));
                return 1;
            }
        }
        printf("sent %d\n", n);
        fflush(stdout);
        pause();
        return 0;
    }
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        rc = rtlab_channel_recv(ch, buf, sizeof buf, &len, rtlab_now_ns() + 10 * SECOND);
        int wlen = snprintf(want, sizeof want, "msg %d", i);
        if (rc != 0 || len != (size_t)wlen || memcmp(buf, want, len) != 0) {
            fprintf(stderr, "recv %d: %s\n", i, rc ? rtlab_strerror(rc) : "wrong message");
            return 1;
        }
    }
    printf("received %d\n", n);
    fflush(stdout);
    rc = rtlab_channel_recv(ch, buf, sizeof buf, &len, rtlab_now_ns() + 30 * SECOND);
    if (rc == RTLAB_EPEERDIED) {
        printf("peer died\n");
        rtlab_channel_close(ch);
        return 0;
    }
    fprintf(stderr, "after the last message: %s\n", rc ? rtlab_strerror(rc) : "one more message");
    return 1;
}
