/* workq.h - worker threads whose results are run back on the owner's thread. */
#ifndef SBX_POOL_WORKQ_H
#define SBX_POOL_WORKQ_H

#include <stdbool.h>

#include <sandbox/pool.h>

typedef struct sbx_workq sbx_workq;

int sbxi_workq_new(unsigned threads, sbx_workq **out, sbx_error *err);
/* Joins the threads after the running jobs end; queued jobs and pending
 * completions get done(arg, true) on the calling thread. */
void sbxi_workq_free(sbx_workq *q);
void sbxi_workq_submit(sbx_workq *q, sbx_job_fn work, sbx_job_done_fn done, void *arg, bool urgent);
int sbxi_workq_fd(const sbx_workq *q);
/* How workers run jobs submitted as not urgent (urgent ones: normal). */
void sbxi_workq_set_background(sbx_workq *q, sbx_pool_sched s, bool spare_cpu);
/* Make the fd readable without a finished job (a merged kick). */
void sbxi_workq_wake(sbx_workq *q);
/* Run every finished job's done callback; returns how many ran. */
int sbxi_workq_dispatch(sbx_workq *q);

#endif
