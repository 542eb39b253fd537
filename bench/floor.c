/*
 * The floor of a design with one monitor process per run, for the dispatch measure of
 * bench/suite.py: what the least a fleet-like supervisor could do per run costs on this
 * machine, measured beside xargs and fleet in the same loop.
 *
 *     floor RUNS PARALLEL bare|durable DIR
 *
 * A parent keeps PARALLEL monitors alive until RUNS have run. Each monitor is a fork of this
 * small parent; it starts `true` with posix_spawnp (a vfork-style start in glibc), waits for
 * it and exits. With `durable`, the monitor first does what fleet's durability contract needs
 * of a run's files, in the same order, and nothing more: it creates DIR/<n>.lock, appends a
 * line and makes it durable (fdatasync), makes the new name durable (fsync of DIR), and after
 * the command has ended appends a second line and makes it durable. No lock, no database, no
 * report to a daemon, no log.
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

/* One run's monitor; returns the monitor's exit status. */
static int monitor(int id, int durable, const char *dir) {
    int fd = -1;
    if (durable) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%d.lock", dir, id);
        fd = open(path, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
        if (fd < 0)
            return 10;
        if (write(fd, "started\n", 8) != 8 || fdatasync(fd) != 0)
            return 11;
        int d = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (d < 0 || fsync(d) != 0)
            return 12;
        close(d);
    }
    char *argv[] = {"true", NULL};
    pid_t child;
    if (posix_spawnp(&child, "true", NULL, NULL, argv, environ) != 0)
        return 13;
    int status;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return 14;
    if (durable && (write(fd, "exit 0\n", 7) != 7 || fdatasync(fd) != 0))
        return 15;
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 5 || (strcmp(argv[3], "bare") != 0 && strcmp(argv[3], "durable") != 0)) {
        fprintf(stderr, "usage: floor RUNS PARALLEL bare|durable DIR\n");
        return 2;
    }
    char *end1, *end2;
    long runs = strtol(argv[1], &end1, 10), parallel = strtol(argv[2], &end2, 10);
    int durable = strcmp(argv[3], "durable") == 0;
    if (*argv[1] == '\0' || *end1 != '\0' || *argv[2] == '\0' || *end2 != '\0' || runs < 0 ||
        runs > 100000000 || parallel < 1 || parallel > 4096) {
        fprintf(stderr, "floor: RUNS must be a number from 0 to 100000000 and PARALLEL from 1 to 4096\n");
        return 2;
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
                _exit(monitor(id, durable, argv[4]));
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
