/*
 * janitor.h: removing the job secret whatever ends the launcher.
 *
 * The launcher writes a fresh job secret into its private directory for the local daemons,
 * and removes it once they have read it (they are ready) or when it exits. A launcher
 * killed before that (SIGKILL, the OOM killer) would leave it in /tmp: a janitor process,
 * in a session of its own so that a signal to the launcher's process group spares it,
 * waits for the end of a pipe only the launcher holds and then removes the file.
 */
#ifndef SPARSECOMM_RUN_JANITOR_H
#define SPARSECOMM_RUN_JANITOR_H

/* Starts the janitor of path; returns the pipe's end the launcher keeps open (close-on-
 * exec) for as long as it lives, or -1 with errno. */
int run_janitor_start(const char *path);

#endif
