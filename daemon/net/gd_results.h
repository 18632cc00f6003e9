/*
 * gd_results.h - the job events of a connection's calls: the waiter gd_admission.c admits every
 * gemm with. A result chunk is checked to continue C, headed with the reply's head on the first
 * and handed to the reply queue (gd_replyq.h, which owns it from there), or, for a call with
 * `out`, copied into its region and given back (the last sends the reply). A failure is answered
 * with its error (or closes the connection when half the reply is out). INPUT_RESUME goes back
 * up to the dispatch (gd_session_hooks.resume).
 *
 * The thread of the connection's loop only (gd_netloop.h).
 */
#ifndef GD_RESULTS_H
#define GD_RESULTS_H

#include "gd_job.h"
#include "gd_session.h"

void gd_results_on_event(gd_job_waiter *w, gd_job *job, const gd_backend_event *ev);

#endif /* GD_RESULTS_H */
