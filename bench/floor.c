/*
 * The floor of a design with one monitor process per run, for the dispatch measure of
 * bench/suite.py: what the least a fleet-like supervisor could do per run costs on this
 * machine, measured beside xargs and fleet in the same loop.
 *
 *     floor RUNS PARALLEL bare|durable|unsynced|shared DIR
 *
 * A parent keeps PARALLEL monitors alive until RUNS have run. Each monitor is a fork of this
 * small parent; it starts `true` with posix_spawnp (a vfork-style start in glibc), waits for
 * it and exits. The modes add what a run's durable records cost, and nothing more: no
 * database, no report to a daemon, no log.
 *
 *   bare      nothing else.
 *   durable   what fleet's run files need, in the same order: the monitor creates
 *             DIR/<n>.lock, appends a line and makes it durable (fdatasync), makes the new
 *             name durable (fsync of DIR), and after the command has ended appends a second
 *             line and makes it durable.
 *   unsynced  the same file and lines without any sync: what the new file alone costs.
 *   shared    the same records without a new file per run: every monitor takes a
 *             byte-range lock (an open-file-description lock on byte <n>) of one DIR/locks
 *             and appends its two lines, each made durable (fdatasync), to one DIR/journal.
 *             Both files exist before the first run, so no name needs a sync.
 *
 * Exit status: 0 when every run's monitor and command exited 0; 1 and a line on stderr
 * otherwise; 2 on bad arguments.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

enum mode { BARE, DURABLE, UNSYNCED, SHARED };

/* Appends `line` to `fd` and, when `sync`, makes it durable; 0 on success. */
static int append(int fd, const char *line, int sync) {
    size_t n = strlen(line);
    if (write(fd, line, n) != (ssize_t)n)
        return -1;
    return sync ? fdatasync(fd) : 0;
}

/* One run's monitor; returns the monitor's exit status. */
static int monitor(int id, enum mode mode, const char *dir) {
    char path[4096], line[64];
    int fd = -1;
    if (mode == DURABLE || mode == UNSYNCED) {
        snprintf(path, sizeof path, "%s/%d.lock", dir, id);
        fd = open(path, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
        if (fd < 0)
            return 10;
        if (append(fd, "started\n", mode == DURABLE) != 0)
            return 11;
        if (mode == DURABLE) {
            int d = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            if (d < 0 || fsync(d) != 0)
                return 12;
            close(d);
        }
    } else if (mode == SHARED) {
        /* The lock proves the monitor alive as the lock file of `durable` does, held by the
         * open file description (so released when the monitor dies), on a byte of its own. */
        snprintf(path, sizeof path, "%s/locks", dir);
        int l = open(path, O_RDWR | O_CLOEXEC);
        struct flock lock = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = id, .l_len = 1};
        if (l < 0 || fcntl(l, F_OFD_SETLK, &lock) != 0)
            return 16;
        snprintf(path, sizeof path, "%s/journal", dir);
        fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
        snprintf(line, sizeof line, "started %d\n", id);
        if (fd < 0 || append(fd, line, 1) != 0)
            return 17;
    }
    char *argv[] = {"true", NULL};
    pid_t child;
    if (posix_spawnp(&child, "true", NULL, NULL, argv, environ) != 0)
        return 13;
    int status;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return 14;
    snprintf(line, sizeof line, mode == SHARED ? "exit %d 0\n" : "exit 0\n", id);
    if (mode != BARE && append(fd, line, mode != UNSYNCED) != 0)
        return 15;
    return 0;
}

/* Creates DIR/locks and DIR/journal for `shared`, durably; 0 on success. */
static int prepare_shared(const char *dir) {
    char path[4096];
    const char *names[] = {"locks", "journal"};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        int fd = open(path, O_CREAT | O_RDWR | O_CLOEXEC, 0600);
        if (fd < 0 || fsync(fd) != 0)
            return -1;
        close(fd);
    }
    int d = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (d < 0 || fsync(d) != 0)
        return -1;
    close(d);
    return 0;
}

int main(int argc, char **argv) {
    const char *modes[] = {"bare", "durable", "unsynced", "shared"};
    int mode = -1;
    for (int i = 0; argc == 5 && i < 4; i++)
        if (strcmp(argv[3], modes[i]) == 0)
            mode = i;
    if (mode < 0) {
        fprintf(stderr, "usage: floor RUNS PARALLEL bare|durable|unsynced|shared DIR\n");
        return 2;
    }
    char *end1, *end2;
    long runs = strtol(argv[1], &end1, 10), parallel = strtol(argv[2], &end2, 10);
    if (*argv[1] == '\0' || *end1 != '\0' || *argv[2] == '\0' || *end2 != '\0' || runs < 0 ||
        runs > 100000000 || parallel < 1 || parallel > 4096) {
        fprintf(stderr, "floor: RUNS must be a number from 0 to 100000000 and PARALLEL from 1 to 4096\n");
        return 2;
    }
    if (mode == SHARED && prepare_shared(argv[4]) != 0) {
        perror("floor: creating the shared files");
        return 1;
    }
    long started = 0, alive = 0, failed = 0;
    while (started < runs || alive > 0) {
        while (alive < parallel && started < runs) {
            int id = (int)started++;
            pid_t m = fork();
            if (m < 0) {
                perror("floor: fork");
                return 1;
            }
            if (m == 0)
                _exit(monitor(id, (enum mode)mode, argv[4]));
            alive++;
        }
        int status;
        if (wait(&status) > 0) {
            alive--;
            if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                failed++;
        }
    }
    if (failed) {
        fprintf(stderr, "floor: %ld of %ld runs failed\n", failed, runs);
        return 1;
    }
    return 0;
}
