/* Forward pass of the reference decoder: RMSNorm, RoPE, multi-head attention with a KV cache, SwiGLU
 * feed-forward, classifier tied to the token embedding (as in llama2.c). One token per call: this is
 * the decode path that llama-bench's "tg" figure measures.
 *
 * Reproducibility: every reduction runs in one fixed order and transcendental functions come from
 * detmath.h, so a native build and the wasm build produce the same token ids for the same seed.
 */
#include "llm.h"

#include "detmath.h"
#include "rng.h"
#include "simd.h"

#include <stdlib.h>

enum { BUCKETS = 4096 }; /* ce_llm_token_at_rank's slices of the logits' range */
enum { D = CE_LLM_DIM, H = CE_LLM_HIDDEN, L = CE_LLM_LAYERS, NH = CE_LLM_HEADS, HS = CE_LLM_HEAD_SIZE,
       V = CE_LLM_VOCAB, S = CE_LLM_SEQ_LEN };

typedef struct {
    float *rms_att, *wq, *wk, *wv, *wo, *rms_ffn, *w1, *w2, *w3;
} layer_weights;

struct ce_llm {
    float *arena;      /* every weight, in one allocation */
    float *embedding;  /* V x D, also the classifier */
    layer_weights layer[L];
    float *rms_final;  /* D */
    float *key_cache;  /* L x S x D */
    float *value_cache;
    float *rope_cos, *rope_sin; /* S x HS/2 */
    float x[D], xb[D], xb2[D], q[D], hb[H], hb2[H], att[S];
    float *logits;     /* V */
    uint64_t *order;   /* order keys of one bucket's logits, scratch for ce_llm_token_at_rank */
    int rank_count[BUCKETS];
};

long ce_llm_param_count(void) {
    return (long)V * D + (long)L * (2L * D + 4L * D * D + 3L * D * H) + D;
}

/* Uniform weights scaled by sqrt(3 / fan_in) keep every activation near unit variance: no overflow
 * and, more importantly, no denormals (see detmath.h). */
static void fill_uniform(ce_rng *rng, float *w, long count, float scale) {
    for (long i = 0; i < count; ++i) w[i] = ce_rng_uniform(rng) * scale;
}

/* Small token embeddings: the classifier is tied to the embedding, and if a token's own embedding
 * dominated the residual stream, greedy decoding would lock onto repeating the input token. At this scale
 * the transformer layers dominate and the decoded sequence varies, so its hash witnesses real work. */
#define EMBED_SCALE 0.05f

static void fill_norm(ce_rng *rng, float *w, long count) {
    for (long i = 0; i < count; ++i) w[i] = 1.0f + 0.125f * ce_rng_uniform(rng);
}

ce_llm *ce_llm_new(uint64_t seed) {
    ce_llm *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->arena = malloc(sizeof(float) * (size_t)ce_llm_param_count());
    m->key_cache = malloc(sizeof(float) * (size_t)L * S * D);
    m->value_cache = malloc(sizeof(float) * (size_t)L * S * D);
    m->rope_cos = malloc(sizeof(float) * S * (HS / 2));
    m->rope_sin = malloc(sizeof(float) * S * (HS / 2));
    m->logits = malloc(sizeof(float) * V);
    m->order = malloc(sizeof(uint64_t) * V);
    if (!m->arena || !m->key_cache || !m->value_cache || !m->rope_cos || !m->rope_sin || !m->logits || !m->order) {
        ce_llm_free(m);
        return NULL;
    }
    ce_rng rng = {seed ^ 0x6c6c6d2d72656631ULL}; /* "llm-ref1" */
    float *p = m->arena;
    const float s_dim = __builtin_sqrtf(3.0f / D), s_hidden = __builtin_sqrtf(3.0f / H);
    m->embedding = p; fill_uniform(&rng, p, (long)V * D, EMBED_SCALE); p += (long)V * D;
    for (int l = 0; l < L; ++l) {
        layer_weights *w = &m->layer[l];
        w->rms_att = p; fill_norm(&rng, p, D); p += D;
        w->wq = p; fill_uniform(&rng, p, (long)D * D, s_dim); p += (long)D * D;
        w->wk = p; fill_uniform(&rng, p, (long)D * D, s_dim); p += (long)D * D;
        w->wv = p; fill_uniform(&rng, p, (long)D * D, s_dim); p += (long)D * D;
        w->wo = p; fill_uniform(&rng, p, (long)D * D, s_dim); p += (long)D * D;
        w->rms_ffn = p; fill_norm(&rng, p, D); p += D;
        w->w1 = p; fill_uniform(&rng, p, (long)H * D, s_dim); p += (long)H * D;
        w->w2 = p; fill_uniform(&rng, p, (long)D * H, s_hidden); p += (long)D * H;
        w->w3 = p; fill_uniform(&rng, p, (long)H * D, s_dim); p += (long)H * D;
    }
    m->rms_final = p; fill_norm(&rng, p, D);
    /* RoPE table: theta_i = 10000^(-2i/HS), angle = pos * theta_i. */
    for (int pos = 0; pos < S; ++pos) {
        for (int i = 0; i < HS / 2; ++i) {
            double theta = ce_exp(-9.21034037197618273607 * (2.0 * i) / HS); /* ln(10000) */
            double s, c;
            ce_sincos(pos * theta, &s, &c);
            m->rope_cos[pos * (HS / 2) + i] = (float)c;
            m->rope_sin[pos * (HS / 2) + i] = (float)s;
        }
    }
    return m;
}

void ce_llm_free(ce_llm *m) {
    if (!m) return;
    free(m->arena);
    free(m->key_cache);
    free(m->value_cache);
    free(m->rope_cos);
    free(m->rope_sin);
    free(m->logits);
    free(m->order);
    free(m);
}

const float *ce_llm_logits(const ce_llm *m) { return m->logits; }

static void rmsnorm(float *out, const float *x, const float *weight) {
    float ss = 0.0f;
    for (int i = 0; i < D; ++i) ss += x[i] * x[i];
    float inv = 1.0f / __builtin_sqrtf(ss / D + 1e-5f);
    for (int i = 0; i < D; ++i) out[i] = weight[i] * (inv * x[i]);
}

/* out[rows] = W[rows x cols] . x[cols]; rows % 4 == 0 and cols % 4 == 0 for every shape of the model.
 * Four rows at a time share each load of x. */
static void matvec(float *restrict out, const float *restrict w, const float *restrict x, int rows, int cols) {
    for (int i = 0; i < rows; i += 4) {
        const float *r0 = w + (size_t)i * cols, *r1 = r0 + cols, *r2 = r1 + cols, *r3 = r2 + cols;
        vf4 a0 = vf4_zero(), a1 = vf4_zero(), a2 = vf4_zero(), a3 = vf4_zero();
        for (int j = 0; j < cols; j += 4) {
            vf4 xv = vf4_load(x + j);
            a0 = vf4_muladd(a0, vf4_load(r0 + j), xv);
            a1 = vf4_muladd(a1, vf4_load(r1 + j), xv);
            a2 = vf4_muladd(a2, vf4_load(r2 + j), xv);
            a3 = vf4_muladd(a3, vf4_load(r3 + j), xv);
        }
        out[i] = vf4_hsum(a0);
        out[i + 1] = vf4_hsum(a1);
        out[i + 2] = vf4_hsum(a2);
        out[i + 3] = vf4_hsum(a3);
    }
}

static void rope(float *v, const float *cosv, const float *sinv) {
    for (int h = 0; h < NH; ++h) {
        float *head = v + h * HS;
        for (int i = 0; i < HS / 2; ++i) {
            float a = head[2 * i], b = head[2 * i + 1];
            head[2 * i] = a * cosv[i] - b * sinv[i];
            head[2 * i + 1] = a * sinv[i] + b * cosv[i];
        }
    }
}

static void softmax(float *x, int n) {
    float max = x[0];
    for (int i = 1; i < n; ++i)
        if (x[i] > max) max = x[i];
    float sum = 0.0f;
    for (int i = 0; i < n; ++i) {
        x[i] = ce_expf_nodenormal(x[i] - max);
        sum += x[i];
    }
    for (int i = 0; i < n; ++i) x[i] /= sum;
}

static void attention(ce_llm *m, int l, int pos) {
    const float *kc = m->key_cache + (size_t)l * S * D, *vc = m->value_cache + (size_t)l * S * D;
    const float scale = 1.0f / __builtin_sqrtf((float)HS);
    for (int h = 0; h < NH; ++h) {
        const float *q = m->q + h * HS;
        for (int t = 0; t <= pos; ++t) {
            const float *k = kc + (size_t)t * D + h * HS;
            vf4 acc = vf4_zero();
            for (int i = 0; i < HS; i += 4) acc = vf4_muladd(acc, vf4_load(q + i), vf4_load(k + i));
            m->att[t] = vf4_hsum(acc) * scale;
        }
        softmax(m->att, pos + 1);
        vf4 out[HS / 4];
        for (int i = 0; i < HS / 4; ++i) out[i] = vf4_zero();
        for (int t = 0; t <= pos; ++t) {
            const float *v = vc + (size_t)t * D + h * HS;
            vf4 a = vf4_splat(m->att[t]);
            for (int i = 0; i < HS / 4; ++i) out[i] = vf4_muladd(out[i], a, vf4_load(v + 4 * i));
        }
        for (int i = 0; i < HS / 4; ++i) vf4_store(m->xb + h * HS + 4 * i, out[i]);
    }
}

/* Runs the layers for one token at pos, filling the KV cache. With kv_only, the last layer stops once its keys
 * and values are cached: a prefill position's own output is never read, only its cache entries are. */
static void layers(ce_llm *m, int token, int pos, int kv_only) {
    for (int i = 0; i < D; ++i) m->x[i] = m->embedding[(size_t)token * D + i];
    const float *cosv = m->rope_cos + pos * (HS / 2), *sinv = m->rope_sin + pos * (HS / 2);
    for (int l = 0; l < L; ++l) {
        const layer_weights *w = &m->layer[l];
        float *k = m->key_cache + ((size_t)l * S + pos) * D, *v = m->value_cache + ((size_t)l * S + pos) * D;
        rmsnorm(m->xb, m->x, w->rms_att);
        if (kv_only && l == L - 1) {
            matvec(k, w->wk, m->xb, D, D);
            matvec(v, w->wv, m->xb, D, D);
            rope(k, cosv, sinv);
            return;
        }
        matvec(m->q, w->wq, m->xb, D, D);
        matvec(k, w->wk, m->xb, D, D);
        matvec(v, w->wv, m->xb, D, D);
        rope(m->q, cosv, sinv);
        rope(k, cosv, sinv);
        attention(m, l, pos);
        matvec(m->xb2, w->wo, m->xb, D, D);
        for (int i = 0; i < D; ++i) m->x[i] += m->xb2[i];
        rmsnorm(m->xb, m->x, w->rms_ffn);
        matvec(m->hb, w->w1, m->xb, H, D);
        matvec(m->hb2, w->w3, m->xb, H, D);
        for (int i = 0; i < H; ++i) {
            float a = m->hb[i]; /* SiLU(a) * gate */
            m->hb[i] = a / (1.0f + ce_expf_nodenormal(-a)) * m->hb2[i];
        }
        matvec(m->xb, w->w2, m->hb, D, H);
        for (int i = 0; i < D; ++i) m->x[i] += m->xb[i];
    }
}

int ce_llm_prefill(ce_llm *m, int token, int pos) {
    if (!m || token < 0 || token >= V || pos < 0 || pos >= S) return -1;
    layers(m, token, pos, 1);
    return 0;
}

int ce_llm_forward(ce_llm *m, int token, int pos) {
    if (!m || token < 0 || token >= V || pos < 0 || pos >= S) return -1;
    layers(m, token, pos, 0);
    rmsnorm(m->x, m->x, m->rms_final);
    matvec(m->logits, m->embedding, m->x, V, D);
    int best = 0;
    for (int i = 1; i < V; ++i)
        if (m->logits[i] > m->logits[best]) best = i;
    return best;
}

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

int ce_llm_draw_rank(uint64_t seed, int seq, int step) {
    uint64_t z = mix64(seed ^ 0x72616e6b2d736d70ULL); /* "rank-smp" */
    z = mix64(z + 0x9e3779b97f4a7c15ULL * (uint64_t)(uint32_t)seq);
    z = mix64(z + 0xd1b54a32d192ed03ULL * (uint64_t)(uint32_t)step);
    return CE_LLM_RANK_FLOOR + (int)(z % (uint64_t)(V - CE_LLM_RANK_FLOOR));
}

/* A key whose ascending order is the rank order: the logit's bits made to sort as unsigned integers, inverted
 * (highest logit first), above the token id (equal logits: lower id first). */
static uint64_t order_key(float logit, int id) {
    union { float f; uint32_t u; } v = {logit};
    uint32_t ascending = (v.u & 0x80000000u) ? ~v.u : (v.u | 0x80000000u);
    return (uint64_t)(~ascending) << 32 | (uint32_t)id;
}

static void swap_keys(uint64_t *k, int a, int b) {
    uint64_t t = k[a];
    k[a] = k[b];
    k[b] = t;
}


/* Which of BUCKETS equal slices of [lo, hi] a logit falls in: monotone in the logit (float subtraction and
 * multiplication round monotonically), so a higher bucket never holds a lower logit. */
static int bucket_of(float logit, float lo, float scale) {
    int b = (int)((logit - lo) * scale);
    return b < 0 ? 0 : b >= BUCKETS ? BUCKETS - 1 : b;
}

int ce_llm_token_at_rank(ce_llm *m, int rank) {
    if (!m || rank < 0 || rank >= V) return -1;
    const float *l = m->logits;
    float lo = l[0], hi = l[0];
    for (int i = 1; i < V; ++i) {
        lo = l[i] < lo ? l[i] : lo;
        hi = l[i] > hi ? l[i] : hi;
    }
    /* The bucket holding the rank, counted from the top; then only its few tokens are ordered exactly. */
    float scale = hi > lo ? (float)BUCKETS / (hi - lo) : 0.0f;
    int *count = m->rank_count;
    for (int b = 0; b < BUCKETS; ++b) count[b] = 0;
    for (int i = 0; i < V; ++i) count[bucket_of(l[i], lo, scale)] += 1;
    int bucket = BUCKETS - 1, above = 0;
    while (above + count[bucket] <= rank) above += count[bucket--];
    uint64_t *k = m->order;
    int n = 0;
    for (int i = 0; i < V; ++i)
        if (bucket_of(l[i], lo, scale) == bucket) k[n++] = order_key(l[i], i);
    int want = rank - above, left = 0, right = n - 1;
    while (left < right) { /* quickselect; keys are distinct (the id is in them), so any pivot rule agrees */
        int mid = left + (right - left) / 2;
        if (k[mid] < k[left]) swap_keys(k, left, mid);
        if (k[right] < k[left]) swap_keys(k, left, right);
        if (k[mid] < k[right]) swap_keys(k, mid, right); /* the median of three now at right */
        uint64_t pivot = k[right];
        int store = left;
        for (int i = left; i < right; ++i)
            if (k[i] < pivot) swap_keys(k, i, store++);
        swap_keys(k, store, right);
        if (want == store) break;
        if (want < store) right = store - 1; else left = store + 1;
    }
    return (int)(uint32_t)k[want];
}
