/*
 * jobd.h: the node's daemon of a job started under a scheduler (mpirun, srun, torchrun, a
 * Kubernetes job), which the node's first trainer starts as `sparsecomm-run --node-daemon`
 * (docs/deployment.md, "Under a scheduler"). The files in the job's directory DIR:
 *
 *   DIR/node<N>/            the daemon's runtime directory (ctl.sock appears when ready)
 *   DIR/daemon<N>.log       its log
 *   DIR/node<N>.t<L>        the pid of node N's trainer L, written by the trainer itself
 *   DIR/node<N>.run.log     what sparsecomm-run --node-daemon says (the daemon's failure)
 *   DIR/node<N>.failed      written when the daemon could not start: the trainers stop
 *                           waiting and report run.log's last lines
 *
 * The node's daemon stops when every trainer that registered has exited (its pid watched
 * through a pidfd), and then removes the node's files, and DIR when it is empty.
 */
#ifndef SC_RUN_JOBD_H
#define SC_RUN_JOBD_H

#include <stdbool.h>
#include <sys/types.h>

typedef struct run_watch {
	int n;	    /* trainers on the node */
	pid_t *pid; /* 0: not registered yet */
	int *fd;    /* pidfd, -1: none (then kill(pid, 0) is asked) */
	bool *gone;
} run_watch_t;

/* Watches a node's n trainers. Returns -1 on out of memory. */
int run_watch_init(run_watch_t *w, int n);
/* Registers trainers that have written their pid since the last call and notes those
 * that have exited. *registered_p counts the trainers seen so far; returns how many of
 * them are still running. */
int run_watch_scan(run_watch_t *w, const char *dir, int node, int *registered_p);
void run_watch_free(run_watch_t *w);

/* Removes node's files from dir (above), and dir itself when nothing else is left. */
void run_node_files_remove(const char *dir, int node);

#endif
