/* The port's scheduler, dry run: one line per step in its own format,
 *   [sched] step 12: +8,192 tok over 16 req (128 drafts), evicted 0
 * A step schedules running requests first (each its prompt left, or 1 + its k draft placeholders), then
 * admits waiting ones while max_num_seqs and the pool's free blocks allow, charging each scheduled
 * request the drafting slots of the method against the step budget. With async scheduling a step is
 * planned before the previous one's output is known (a queue of two batches), as vLLM's AsyncScheduler
 * runs under EngineCore: a request's output arrives one step late, its rejected drafts are taken back
 * then, and it finishes when that output reaches its output length.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "port.h"

struct req {
    i64 computed, out, placeholders, spec, attn_blocks;
    int running, done, allocated;
};

struct item { int r; i64 n, spec; int samples; };
struct batch { int len; struct item *items; i64 total; };

static const char *sep(i64 n, char *out) {
    char w[32];
    int len = snprintf(w, sizeof w, "%lld", n);
    char *o = out;
    for (int c = 0; c < len; c++) {
        if (c && (len - c) % 3 == 0) *o++ = ',';
        *o++ = w[c];
    }
    *o = 0;
    return out;
}

static i64 cdiv(i64 a, i64 b) { return (a + b - 1) / b; }

void trace(const struct plan *p, int requests, i64 prompt, i64 output, int accepted, int k, int async_on,
           i64 max_model_len, i64 num_blocks, i64 blocks_per_seq_state, i64 block_tokens, int attn_groups) {
    (void)max_model_len;
    if (requests <= 0) return;
    struct req *rs = calloc((size_t)requests, sizeof *rs);
    int *order = calloc((size_t)requests, sizeof *order);   /* running requests in admission order */
    int n_running = 0, next_waiting = 0, step = 0, depth = async_on ? 2 : 1;
    i64 free_blocks = num_blocks > 0 ? num_blocks - 1 : -1;  /* block 0 is the null block */
    struct batch queue[2];
    int queued = 0;
    i64 last_total = -1;
    char a[32], b[32];
    for (;;) {
        int has = n_running > 0 || next_waiting < requests;
        if (has || (queued < depth && last_total > 0)) {
            struct batch bt = {0, calloc((size_t)requests, sizeof(struct item)), 0};
            i64 budget = p->step_budget, drafts = 0;
            for (int i = 0; i < n_running && budget > 0; i++) {
                struct req *r = &rs[order[i]];
                i64 n = prompt + r->out + r->spec + r->placeholders - r->computed;
                if (n > budget - p->slots) n = budget - p->slots;
                if (n <= 0) continue;
                i64 blocks = cdiv(r->computed + n + p->lookahead, block_tokens);
                if (free_blocks >= 0) free_blocks -= (blocks - r->attn_blocks) * attn_groups;
                r->attn_blocks = blocks;
                bt.items[bt.len++] = (struct item){order[i], n, 0, 0};
                budget -= n + p->slots;
            }
            while (next_waiting < requests && budget - p->slots > 0 && n_running < p->max_seqs) {
                struct req *r = &rs[next_waiting];
                i64 n = prompt - r->computed;
                if (n > budget - p->slots) n = budget - p->slots;
                i64 blocks = cdiv(r->computed + n + p->lookahead, block_tokens);
                i64 need = blocks_per_seq_state + blocks * attn_groups;
                if (free_blocks >= 0 && need > free_blocks) break;
                if (free_blocks >= 0) free_blocks -= need;
                r->attn_blocks = blocks;
                r->running = 1;
                order[n_running++] = next_waiting;
                bt.items[bt.len++] = (struct item){next_waiting, n, 0, 0};
                budget -= n + p->slots;
                next_waiting++;
            }
            for (int i = 0; i < bt.len; i++) {
                struct item *it = &bt.items[i];
                struct req *r = &rs[it->r];
                i64 before = prompt + r->out + r->placeholders;
                it->spec = r->spec ? r->computed + it->n - before : 0;
                if (it->spec < 0) it->spec = 0;
                if (it->spec > r->spec) it->spec = r->spec;
                r->computed += it->n;
                it->samples = r->computed >= before;
                if (it->samples) {
                    r->placeholders += 1 + it->spec;
                    r->spec = k;
                }
                bt.total += it->n;
                drafts += it->spec;
            }
            printf("[sched] step %d: +%s tok over %d req (%s drafts), evicted 0\n", step++, sep(bt.total, a), bt.len,
                   sep(drafts, b));
            last_total = bt.total;
            queue[queued++] = bt;
            if (bt.total > 0 && queued < depth) continue;
        } else if (!queued) {
            break;
        }
        struct batch done = queue[0];
        queue[0] = queue[1];
        queued--;
        for (int i = 0; i < done.len; i++) {
            struct item *it = &done.items[i];
            struct req *r = &rs[it->r];
            if (!it->samples || r->done) continue;
            i64 acc = accepted < it->spec ? accepted : it->spec;
            r->placeholders -= 1 + it->spec;
            r->computed -= it->spec - acc;
            r->out += 1 + acc;
            if (r->out >= output) {
                r->out = output;
                r->done = 1;
                if (free_blocks >= 0) free_blocks += blocks_per_seq_state + r->attn_blocks * attn_groups;
                int j = 0;
                for (int m = 0; m < n_running; m++)
                    if (order[m] != it->r) order[j++] = order[m];
                n_running = j;
            }
        }
        free(done.items);
    }
    free(rs);
    free(order);
}
