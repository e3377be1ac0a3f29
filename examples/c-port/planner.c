/* A stand-in port's dry-run planner in C, planned through `plan.log`: it prints its plan as a person
 * reads it (human units, thousands separators) and a per-step scheduler trace in its own format; the
 * engine files' regexes are the whole contract with the framework, which never reads this file.
 *
 *   planner --target DIR [--draft DIR] --method M --k K --max-num-seqs N --max-model-len L
 *           --max-num-batched-tokens T --kv-cache-bytes B --requests R --prompt-tokens P
 *           --output-tokens O --accepted A --async true|false --defects LIST
 *
 * Sound (defects none): vLLM 0.33's layout for a Qwen3.5-style hybrid target: attention block raised
 * to hold a whole GDN state page (16-token kernel alignment), the state page padded to the attention
 * page, layers grouped into KV-cache groups of the fewest layers of a kind, every group (the draft's
 * too) in one pool under the bound; vLLM's drafting table.
 * Defects: pages-16 (attention paged in 16-token blocks, state pages unpadded, no group padding: one
 * pool, everything inside the bound); draft-outside-bound (one draft KV store per batch row beside the
 * pool, max_model_len + one 16-token page, as the port's first version did).
 * Exit 3 with a `server: fatal:` line when it refuses.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "port.h"

static char *slurp(const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "server: cannot read %s\n", path); exit(2); }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) { fprintf(stderr, "server: short read %s\n", path); exit(2); }
    buf[n] = 0;
    fclose(f);
    return buf;
}

/* The integer after "key": in a config.json, or `dflt` when the key is absent. */
static i64 json_int(const char *text, const char *key, i64 dflt) {
    char pat[128];
    snprintf(pat, sizeof pat, "\"%s\"", key);
    const char *p = strstr(text, pat);
    if (!p) return dflt;
    p = strchr(p + strlen(pat), ':');
    return p ? strtoll(p + 1, NULL, 10) : dflt;
}

static int count(const char *text, const char *word) {
    int n = 0;
    for (const char *p = text; (p = strstr(p, word)); p += strlen(word)) n++;
    return n;
}

static i64 cdiv(i64 a, i64 b) { return (a + b - 1) / b; }

/* `1,404.000 MiB`: the largest binary unit that prints the figure exactly to 3 decimals. */
static const char *human(i64 bytes, char *out) {
    static const char *names[] = {"GiB", "MiB", "KiB"};
    static const i64 sizes[] = {1LL << 30, 1LL << 20, 1LL << 10};
    for (int i = 0; i < 3; i++) {
        if (bytes >= sizes[i] && (bytes * 1000) % sizes[i] == 0) {
            i64 whole = bytes / sizes[i], frac = (bytes % sizes[i]) * 1000 / sizes[i];
            char w[32];
            int len = snprintf(w, sizeof w, "%lld", whole), j = 0;
            char *o = out;
            for (int c = 0; c < len; c++) {
                if (c && (len - c) % 3 == 0) *o++ = ',';
                *o++ = w[c];
            }
            sprintf(o, ".%03lld %s", frac, names[i]);
            (void)j;
            return out;
        }
    }
    char w[32];
    int len = snprintf(w, sizeof w, "%lld", bytes);
    char *o = out;
    for (int c = 0; c < len; c++) {
        if (c && (len - c) % 3 == 0) *o++ = ',';
        *o++ = w[c];
    }
    strcpy(o, " B");
    return out;
}

static const char *sep(i64 n, char *out) {
    char w[32];
    int len = snprintf(w, sizeof w, "%lld", n);
    char *o = out;
    for (int c = 0; c < len; c++) {
        if (c && w[c - 1] != '-' && (len - c) % 3 == 0) *o++ = ',';
        *o++ = w[c];
    }
    *o = 0;
    return out;
}

static int has(const char *list, const char *name) {
    char buf[512];
    snprintf(buf, sizeof buf, ",%s,", list);
    char pat[128];
    snprintf(pat, sizeof pat, ",%s,", name);
    return strstr(buf, pat) != NULL;
}

/* Split n layers into g groups as evenly as possible, larger first; returns the widest. */
static int widest(int n, int g) { return g ? (int)cdiv(n, g) : 0; }


int main(int argc, char **argv) {
    const char *target = 0, *draft = 0, *method = "dflash", *defects = "none", *async_s = "true";
    i64 k = 0, max_seqs = 0, max_len = 0, mnbt = 0, kv_bytes = 0, prompt = 0, output = 0;
    int requests = 0, accepted = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *f = argv[i], *v = argv[i + 1];
        if (!strcmp(f, "--target")) target = v;
        else if (!strcmp(f, "--draft")) draft = v;
        else if (!strcmp(f, "--method")) method = v;
        else if (!strcmp(f, "--k")) k = atoll(v);
        else if (!strcmp(f, "--max-num-seqs")) max_seqs = atoll(v);
        else if (!strcmp(f, "--max-model-len")) max_len = atoll(v);
        else if (!strcmp(f, "--max-num-batched-tokens")) mnbt = atoll(v);
        else if (!strcmp(f, "--kv-cache-bytes")) kv_bytes = atoll(v);
        else if (!strcmp(f, "--requests")) requests = atoi(v);
        else if (!strcmp(f, "--prompt-tokens")) prompt = atoll(v);
        else if (!strcmp(f, "--output-tokens")) output = atoll(v);
        else if (!strcmp(f, "--accepted")) accepted = atoi(v);
        else if (!strcmp(f, "--async")) async_s = v;
        else if (!strcmp(f, "--defects")) defects = v;
        else { fprintf(stderr, "server: unknown flag %s\n", f); return 2; }
    }
    if (!target || !kv_bytes) { fprintf(stderr, "server: --target and --kv-cache-bytes are required\n"); return 2; }
    int pages16 = has(defects, "pages-16"), outside = has(defects, "draft-outside-bound");
    char a[64], b[64], c[64], d[64], e[64], f2[64];

    printf("c-port 0.1.0 dry run: method %s, k %lld, defects %s\n", method, k, defects);
    char *tcfg = slurp(target, "config.json");
    char *dcfg = draft ? slurp(draft, "config.json") : NULL;
    int is_dflash = !strcmp(method, "dflash");
    /* --- scheduler: vLLM's drafting table (SpeculativeConfig.max_num_new_slots_for_drafting) --- */
    struct plan p = {mnbt, 0, k, max_seqs, max_seqs};
    if (is_dflash) { p.slots = 0; p.lookahead = k + 1; }
    else if (!strcmp(method, "draft_model")) p.slots = 1;
    else if (!strcmp(method, "pard")) p.slots = k;
    else if (!strcmp(method, "p-eagle")) p.slots = k - 1;
    else if (!strcmp(method, "ngram")) p.lookahead = 0;
    if (p.lookahead > 0 && mnbt / p.lookahead < p.active) p.active = mnbt / p.lookahead;
    printf("max_num_scheduled_tokens is set to %s (max_num_batched_tokens %s)\n", sep(p.step_budget, a), sep(mnbt, b));
    printf("speculative: %lld drafting slots reserved per request, lookahead %s tokens, max_num_seqs %lld, "
           "at most %lld active\n", p.slots, sep(p.lookahead, a), max_seqs, p.active);

    /* a refusal comes after the figures it was planned from, as the server prints them */
    if (is_dflash && dcfg) {
        i64 block = json_int(dcfg, "block_size", 0);
        if (block > 0 && k > block - 1) {
            printf("server: fatal: num_speculative_tokens %lld does not fit the DFlash drafter's block of %lld "
                   "(at most %lld drafts per step)\n", k, block, block - 1);
            return 3;
        }
    }

    /* --- shapes --- */
    int n_gdn = count(tcfg, "\"linear_attention\""), n_attn = count(tcfg, "\"full_attention\"");
    i64 kv_heads = json_int(tcfg, "num_key_value_heads", 0), head_dim = json_int(tcfg, "head_dim", 0);
    i64 attn_tok = 2 * kv_heads * head_dim * 2;                           /* K and V, bf16 */
    i64 conv_dim = json_int(tcfg, "linear_key_head_dim", 0) * json_int(tcfg, "linear_num_key_heads", 0) * 2
                   + json_int(tcfg, "linear_value_head_dim", 0) * json_int(tcfg, "linear_num_value_heads", 0);
    i64 state_page = (json_int(tcfg, "linear_conv_kernel_dim", 4) - 1 + k) * conv_dim * 2
                     + json_int(tcfg, "linear_num_value_heads", 0) * json_int(tcfg, "linear_value_head_dim", 0)
                       * json_int(tcfg, "linear_key_head_dim", 0) * 4;       /* conv bf16 + SSM float32 */
    int n_draft = dcfg ? (int)json_int(dcfg, "num_hidden_layers", 0) : 0;
    i64 slots_state = 1 + k;
    printf("kv cache: bound %s (--kv-cache-memory-bytes)\n", human(kv_bytes, a));

    /* --- layout --- */
    i64 block, page, mamba_real = state_page;
    if (pages16) {
        block = 16;
        page = 16 * attn_tok;
    } else {
        block = 16 * cdiv(state_page, 16 * attn_tok);
        page = block * attn_tok;
    }
    i64 attn_blocks = cdiv(max_len, block);
    /* the draft's layers: a group of their own for DFlash (non-causal), merged with the target's otherwise */
    int draft_in_pool = n_draft > 0 && !outside;
    int kinds_attn = n_attn + ((draft_in_pool && !is_dflash) ? n_draft : 0);
    int dflash_draft = (draft_in_pool && is_dflash) ? n_draft : 0;
    int gs = n_gdn;
    if (kinds_attn && kinds_attn < gs) gs = kinds_attn;
    if (dflash_draft && dflash_draft < gs) gs = dflash_draft;
    int g_gdn = n_gdn ? (int)cdiv(n_gdn, gs) : 0, g_attn = kinds_attn ? (int)cdiv(kinds_attn, gs) : 0;
    int g_draft = dflash_draft ? (int)cdiv(dflash_draft, gs) : 0;
    int width = widest(n_gdn, g_gdn);
    if (widest(kinds_attn, g_attn) > width) width = widest(kinds_attn, g_attn);
    if (widest(dflash_draft, g_draft) > width) width = widest(dflash_draft, g_draft);

    i64 per_attn = (i64)n_attn * attn_blocks * page;
    i64 per_draft_pool = draft_in_pool ? (i64)n_draft * attn_blocks * page : 0;
    i64 per_state = pages16 ? (i64)n_gdn * slots_state * mamba_real : (i64)n_gdn * slots_state * page;
    i64 draft_store = 0, draft_total = 0;
    if (outside && n_draft) {
        i64 dtok = 2 * json_int(dcfg, "num_key_value_heads", 0) * json_int(dcfg, "head_dim", 0) * 2;
        draft_store = (cdiv(max_len, 16) + 1) * 16 * n_draft * dtok;
        draft_total = draft_store * max_seqs;
    }
    i64 per_seq = per_attn + per_draft_pool + per_state;
    double seats;
    i64 pool, num_blocks = 0, bpb = 0, l_attn, l_draft, l_state, l_pad = 0, l_unused = 0, l_unassigned = 0;
    if (pages16) {   /* one pool of the bound's bytes, no shared page: seats are bytes over a sequence's bytes */
        seats = (double)kv_bytes / (double)per_seq;
        pool = kv_bytes;
        l_attn = (i64)(seats * per_attn);
        l_draft = (i64)(seats * per_draft_pool);
        l_state = (i64)(seats * per_state);
        l_unassigned = pool - l_attn - l_draft - l_state;
        printf("kv cache: attention paged in %lld-token blocks of %s per layer; GDN state %s per slot per layer\n",
               block, human(page, a), human(mamba_real, b));
    } else {
        bpb = (i64)width * page;
        num_blocks = kv_bytes / bpb;
        i64 n_state = (i64)g_gdn * slots_state, n_attn_b = (i64)(g_attn + g_draft) * attn_blocks;
        seats = (double)num_blocks / (double)(n_state + n_attn_b);
        pool = num_blocks * bpb;
        /* blocks shared among groups as one full-length sequence needs them, floored */
        i64 per_group_state = num_blocks * slots_state / (n_state + n_attn_b);
        i64 per_group_attn = num_blocks * attn_blocks / (n_state + n_attn_b);
        l_state = per_group_state * n_gdn * mamba_real;
        l_pad = per_group_state * n_gdn * (page - mamba_real);
        l_attn = per_group_attn * n_attn * page;
        l_draft = per_group_attn * (draft_in_pool ? n_draft : 0) * page;
        l_unused = per_group_state * ((i64)g_gdn * width - n_gdn) * page
                   + per_group_attn * ((i64)(g_attn + g_draft) * width - kinds_attn - dflash_draft) * page;
        l_unassigned = pool - l_state - l_pad - l_attn - l_draft - l_unused;
        printf("Setting attention block size to %lld tokens to ensure that attention page size is >= mamba page "
               "size (page %s, state %s padded)\n", block, human(page, a), human(mamba_real, b));
        printf("kv cache: %d groups of %d layer slots, %s blocks of %s\n", g_gdn + g_attn + g_draft, width,
               sep(num_blocks, a), human(bpb, b));
    }
    printf("per full-length sequence (%s tokens): attention %s, GDN state %s (%lld slots), draft %s\n",
           sep(max_len, a), human(per_attn, b), human(per_state, c), slots_state,
           human(outside ? draft_store : per_draft_pool, d));
    printf("kv cache: one pool for every group, inside the bound\n");
    printf("pool %s: attention %s, GDN state %s, draft %s, page padding %s, group padding %s\n",
           human(pool, a), human(l_attn, b), human(l_state, c), human(l_draft, d), human(l_pad, e),
           human(l_unused, f2));
    if (l_unassigned >= 0) printf("pool unassigned: %s\n", human(l_unassigned, a));
    if (outside && draft_store) {
        printf("draft speculative context is limited to %s tokens (%s per concurrent request across %d draft "
               "layers, so %s of device memory at max_num_seqs %lld -- NOT counted by gpu_memory_utilization)\n",
               sep((cdiv(max_len, 16) + 1) * 16, a), human(draft_store, b), n_draft, human(draft_total, c), max_seqs);
    }
    printf("Maximum concurrency for %s tokens per request: %.3fx\n", sep(max_len, a), seats);
    if ((i64)seats < max_seqs)
        printf("note: the pool seats %lld full-length sequences of %s tokens, fewer than max_num_seqs %lld; "
               "more run while their contexts are short\n", (i64)seats, sep(max_len, a), max_seqs);

    trace(&p, requests, prompt, output, accepted, (int)k, !strcmp(async_s, "true"), max_len,
          pages16 ? 0 : num_blocks, g_gdn * slots_state, block, g_attn + g_draft);
    printf("c-port: plan done\n");
    return 0;
}
