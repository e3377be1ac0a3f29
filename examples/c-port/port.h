/* The port's plan, shared by its planner (planner.c) and its scheduler dry run (trace.c). */
#ifndef C_PORT_H
#define C_PORT_H

typedef long long i64;

struct plan {
    i64 step_budget;   /* max_num_scheduled_tokens */
    i64 slots;         /* drafting slots reserved per scheduled request */
    i64 lookahead;     /* tokens a decoding request may need past its computed ones */
    i64 max_seqs, active;
};

/* Print one `[sched] step` line per step of the workload (see trace.c). num_blocks 0: no block limit. */
void trace(const struct plan *p, int requests, i64 prompt, i64 output, int accepted, int k, int async_on,
           i64 max_model_len, i64 num_blocks, i64 blocks_per_seq_state, i64 block_tokens, int attn_groups);

#endif
