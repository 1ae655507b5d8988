// Flat programs: several expression outputs compiled into one instruction
// list over a small register file, evaluated over candidates in blocks
// (contract in expr.h). This file drives the evaluation; expr_compile.c
// compiles them, and the block kernels, batched and scalar, are in
// expr_block.c.
//
// The instruction set and how expressions become instructions (constants
// folded in, values used once computed inside their user, picks by level as
// one lookup): expr_compile.c.
//
// Hoisting of batch-uniform work: a search evaluates batches in which many
// symbols take one value for a whole block of candidates (the mesh, the
// micro-batch size, the layer count...). Every instruction carries the set of
// symbols it depends on; per block, the evaluator finds the symbol columns
// whose values are all bitwise equal, and the instructions depending only on
// those run once, as scalars, instead of once per candidate. The rest runs as
// a variant of the program (built once per set of uniform symbols and cached
// in the program) in which the hoisted values act as constants: they are
// patched into the instructions' constant fields. The scalar and the batched
// forms of every instruction are the same C expression on the same operands
// (the overlap window: the same operations in the same order, see
// overlap_lanes), so results stay bitwise equal to expr_eval. Hoisted values are recomputed
// only when a uniform symbol's value changes from one block to the next. A
// variant is built (tens of microseconds for a long program) only for a set
// of uniform symbols that lasts more than one block; a block whose set is new
// and seen once (a search's blocks that straddle two groups of rows) runs the
// plain program.
#include "expr/expr.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expr/expr_node.h"
#include "expr/expr_program_internal.h"

// Where a hoisted value goes in the variant's code: field 0 k, 1 k1, 2 k2;
// PATCH_PRODUCT: k = value * the instruction's k (y * k + z with y hoisted
// becomes z + constant); PATCH_BRANCH: a select whose condition is hoisted
// becomes a copy of the branch it picks (or a fill with a constant branch).
enum { PATCH_PRODUCT = 3, PATCH_BRANCH = 4 };
typedef struct {
    int32_t instr, field, slot;
} Patch;

// The program for one set of uniform symbols.
struct Variant {
    uint64_t mask;          // used-symbol positions that are uniform
    ScalarInstr *scalar;    // hoisted instructions, in program order
    int32_t *scalar_slot;   // the slot each writes
    uint64_t *scalar_deps;  // the uniform symbols each depends on
    int num_scalar;
    Instr *code;            // the per-candidate rest, constants patched per block
    int num_code, num_regs;
    Patch *patch;
    uint64_t *patch_deps;   // the uniform symbols each patched value depends on
    int num_patch;
    Output *outs;
};

static void variant_free(Variant *v) {
    if (!v) return;
    free(v->scalar);
    free(v->scalar_slot);
    free(v->scalar_deps);
    free(v->patch_deps);
    free(v->code);
    free(v->patch);
    free(v->outs);
    free(v);
}

void expr_program_free(ExprProgram *p) {
    if (!p) return;
    for (int v = 0; v < EXPR_VARIANTS; v++) variant_free(atomic_load(&p->variants[v]));
    free(p->code);
    free(p->outs);
    free(p->used_syms);
    free(p->sym_pos);
    free(p->deps);
    free(p->tables);
    free(p->steps);
    free(p);
}

int expr_program_num_instructions(const ExprProgram *p) { return p->num_code; }
int expr_program_num_registers(const ExprProgram *p) { return p->num_regs; }
int expr_program_num_syms(const ExprProgram *p) { return p->num_syms; }

// ---- hoisting variants

// A variant's build state. Value ids: instruction i's result is value i;
// fills of hoisted values in the variant get ids nc, nc + 1, ...
typedef struct {
    const ExprProgram *p;
    Variant *v;
    uint64_t mask;           // the uniform symbols (used-symbol positions)
    int nc;                  // instructions of p
    int32_t *writer;         // register of p -> the instruction that last wrote it
    unsigned char *hoisted;  // instruction i of p runs once per block, as a scalar
    int32_t *val_of;         // (variant instr, operand) -> value id
    int32_t *last_use;       // value id -> the last variant instr reading it
    int32_t *def_val;        // variant instr -> the value it writes
    int num_fills;
} VariantBuild;

// slot of an operand that is hoisted, else -1
static int32_t slot_of(const VariantBuild *vb, int32_t o) {
    const ExprProgram *p = vb->p;
    if (o >= 0) return vb->hoisted[vb->writer[o]] ? vb->writer[o] : -1;
    return ((vb->mask >> p->sym_pos[-o - 1]) & 1) ? vb->nc + p->sym_pos[-o - 1] : -1;
}

// Instruction i of p with some operands hoisted (slots[j] >= 0), copied into
// the variant: hoisted operands become constants patched per block, through
// the instruction's constant forms where it has one, else through fills.
static void rewrite_instr(VariantBuild *vb, int i, int32_t slots[4]) {
    const Instr *in = &vb->p->code[i];
    Variant *v = vb->v;
    Instr out = *in;
    int npatch = 0;
    Patch pt[4];
    // a binary op with one hoisted operand becomes its constant form (both
    // hoisted would have made the instruction hoisted)
    if (in->op <= PI_MIN && (slots[0] >= 0 || slots[1] >= 0)) {
        int kb = slots[1] >= 0;  // the constant is the right operand
        static const int32_t right[] = {PI_ADD_K, PI_SUB_K, PI_MUL_K, PI_DIV_K, PI_MAX_K, PI_MIN_K};
        static const int32_t left[] = {PI_ADD_K, PI_K_SUB, PI_MUL_K, PI_K_DIV, PI_K_MAX, PI_K_MIN};
        out.op = kb ? right[in->op] : left[in->op];  // k + a == a + k, k * a == a * k exactly
        out.a = kb ? in->a : in->b;
        pt[npatch++] = (Patch){0, 0, kb ? slots[1] : slots[0]};
        slots[0] = slots[1] = -1;
    }
    // y * k + z with z hoisted: y * k + constant; with y hoisted: z + (y * k)
    if (in->op == PI_MULADD_K && slots[1] >= 0 && slots[0] < 0) {
        out.op = PI_MULADD_KK;
        pt[npatch++] = (Patch){0, 1, slots[1]};
        slots[1] = -1;
    } else if (in->op == PI_MULADD_K && slots[0] >= 0 && slots[1] < 0) {
        out.op = PI_ADD_K;  // k stays the multiplier in the variant's code
        out.a = in->b;
        pt[npatch++] = (Patch){0, PATCH_PRODUCT, slots[0]};
        slots[0] = slots[1] = -1;
    }
    // a select's hoisted branch becomes a constant branch
    if (in->op == PI_SELECT || in->op == PI_SEL_KX || in->op == PI_SEL_XK) {
        int kb1 = !op_reads(in->op, 1) || slots[1] >= 0, kb2 = !op_reads(in->op, 2) || slots[2] >= 0;
        if (slots[1] >= 0) pt[npatch++] = (Patch){0, 1, slots[1]}, slots[1] = -1;
        if (slots[2] >= 0) pt[npatch++] = (Patch){0, 2, slots[2]}, slots[2] = -1;
        out.op = kb1 ? (kb2 ? PI_SEL_KK : PI_SEL_KX) : kb2 ? PI_SEL_XK : PI_SELECT;
        if (slots[0] >= 0) {  // the condition is hoisted: picked per block (after the branch patches)
            pt[npatch++] = (Patch){0, PATCH_BRANCH, slots[0]};
            slots[0] = -1;
        }
    }
    // a hoisted operand left (a select's condition, an overlap's input) goes through a fill
    int32_t *fld[4] = {&out.a, &out.b, &out.c, &out.e};
    int32_t opval[4] = {-1, -1, -1, -1};
    int branch_patched = npatch > 0 && pt[npatch - 1].field == PATCH_BRANCH;
    for (int j = 0; j < 4; j++) {
        if (!op_reads(out.op, j) || (j == 0 && branch_patched)) continue;
        if (slots[j] >= 0) {
            int fv = vb->nc + vb->num_fills++;
            int fi = v->num_code++;
            v->code[fi] = (Instr){PI_FILL, 0, 0, 0, 0, 0, 0.0, 0.0, 0.0, NULL, NULL};
            vb->def_val[fi] = fv;
            for (int q = 0; q < 4; q++) vb->val_of[4 * fi + q] = -1;
            v->patch[v->num_patch++] = (Patch){fi, 0, slots[j]};
            opval[j] = fv;
            *fld[j] = 0;
        } else if (*fld[j] >= 0) {
            opval[j] = vb->writer[*fld[j]];
        }
    }
    int vi = v->num_code++;
    for (int q = 0; q < npatch; q++) pt[q].instr = vi, v->patch[v->num_patch++] = pt[q];
    v->code[vi] = out;
    vb->def_val[vi] = i;
    for (int q = 0; q < 4; q++) vb->val_of[4 * vi + q] = opval[q];
}

// the uniform symbols each hoisted instruction and each patched value depends on
static void variant_deps(VariantBuild *vb) {
    const ExprProgram *p = vb->p;
    Variant *v = vb->v;
    const int nc = vb->nc;
    v->scalar_deps = xmalloc(((size_t)v->num_scalar + 1) * sizeof *v->scalar_deps);
    for (int q = 0; q < v->num_scalar; q++) v->scalar_deps[q] = p->deps[v->scalar_slot[q]];
    v->patch_deps = xmalloc(((size_t)v->num_patch + 1) * sizeof *v->patch_deps);
    for (int q = 0; q < v->num_patch; q++) {
        int32_t slot = v->patch[q].slot;
        v->patch_deps[q] = slot < nc ? p->deps[slot] : (uint64_t)1 << (slot - nc);
        // a branch pick also redoes itself when a branch constant changes
        // (patches of one instruction are consecutive, the pick last)
        for (int r = q - 1; v->patch[q].field == PATCH_BRANCH && r >= 0 && v->patch[r].instr == v->patch[q].instr; r--)
            v->patch_deps[q] |= v->patch_deps[r];
    }
}

// Outputs (a value computed per candidate, hoisted, a symbol or a constant)
// and registers: a linear scan over the variant's code, the destination taken
// before the operands are released (never aliases them).
static void variant_outputs_and_registers(VariantBuild *vb) {
    const ExprProgram *p = vb->p;
    Variant *v = vb->v;
    int nvals = vb->nc + vb->num_fills;
    unsigned char *pinned = xcalloc((size_t)nvals, 1);
    for (int k = 0; k < p->num_outs; k++) {
        Output o = p->outs[k];
        if (o.kind == OUT_FROM_OPERAND && o.operand >= 0) {
            int w = vb->writer[o.operand];
            if (vb->hoisted[w]) o = (Output){OUT_SCALAR, w, 0.0};
            else pinned[w] = 1, o.operand = w;  // value id, a register below
        }
        v->outs[k] = o;
    }
    int32_t *last_use = vb->last_use, *val_of = vb->val_of;
    for (int q = 0; q < nvals; q++) last_use[q] = -1;
    for (int vi = 0; vi < v->num_code; vi++)
        for (int q = 0; q < 4; q++)
            if (val_of[4 * vi + q] >= 0) last_use[val_of[4 * vi + q]] = vi;
    int32_t *reg_of = xmalloc(((size_t)nvals + 1) * sizeof *reg_of);
    RegAlloc ra = {xmalloc(((size_t)v->num_code + 1) * sizeof(int32_t)), 0, 0};
    for (int vi = 0; vi < v->num_code; vi++) {
        Instr *in = &v->code[vi];
        int32_t *fld[4] = {&in->a, &in->b, &in->c, &in->e};
        for (int q = 0; q < 4; q++)
            if (val_of[4 * vi + q] >= 0) *fld[q] = reg_of[val_of[4 * vi + q]];
        int d = vb->def_val[vi];
        in->dst = reg_of[d] = reg_take(&ra);
        for (int q = 0; q < 4; q++) {
            int u = val_of[4 * vi + q];
            int dup = 0;  // an operand read twice is released once
            for (int r = 0; r < q; r++) dup |= val_of[4 * vi + r] == u;
            if (u >= 0 && !dup && last_use[u] == vi && !pinned[u]) reg_give(&ra, reg_of[u]);
        }
        if (last_use[d] < 0 && !pinned[d]) reg_give(&ra, in->dst);  // dead (cannot happen: kept for safety)
    }
    for (int k = 0; k < p->num_outs; k++)
        if (v->outs[k].kind == OUT_FROM_OPERAND && p->outs[k].kind == OUT_FROM_OPERAND && p->outs[k].operand >= 0)
            v->outs[k].operand = reg_of[v->outs[k].operand];
    v->num_regs = ra.num_regs;
    free(ra.free_regs);
    free(reg_of);
    free(pinned);
}

// The instructions of p that depend only on the uniform symbols in mask
// become scalar instructions over value slots; the others are copied with
// hoisted operands turned into constants (patched per block) and registers
// allocated anew for the shorter program.
static Variant *variant_build(const ExprProgram *p, uint64_t mask) {
    const int nc = p->num_code;
    Variant *v = xcalloc(1, sizeof *v);
    v->mask = mask;
    v->scalar = xmalloc((size_t)nc * sizeof *v->scalar);
    v->scalar_slot = xmalloc((size_t)nc * sizeof *v->scalar_slot);
    v->code = xmalloc(((size_t)5 * nc + 1) * sizeof *v->code);  // each may need up to 4 fills
    v->patch = xmalloc(((size_t)4 * nc + 1) * sizeof *v->patch);
    v->outs = xmalloc((size_t)p->num_outs * sizeof *v->outs);
    VariantBuild vb = {p, v, mask, nc, NULL, NULL, NULL, NULL, NULL, 0};
    vb.writer = xmalloc(((size_t)p->num_regs + 1) * sizeof *vb.writer);
    vb.hoisted = xcalloc((size_t)nc, 1);
    vb.val_of = xmalloc(((size_t)5 * nc + 1) * 4 * sizeof(int32_t));
    vb.last_use = xmalloc(((size_t)5 * nc + 1) * sizeof *vb.last_use);
    vb.def_val = xmalloc(((size_t)5 * nc + 1) * sizeof *vb.def_val);
    for (int i = 0; i < nc; i++) {
        const Instr *in = &p->code[i];
        int32_t ops[4] = {in->a, in->b, in->c, in->e}, slots[4] = {-1, -1, -1, -1};
        for (int j = 0; j < 4; j++)
            if (op_reads(in->op, j)) slots[j] = slot_of(&vb, ops[j]);
        if ((p->deps[i] & ~mask) == 0) {  // every operand hoisted (or none): hoisted too
            vb.hoisted[i] = 1;
            v->scalar[v->num_scalar] =
                (ScalarInstr){in->op, slots[0], slots[1], slots[2], slots[3], in->k, in->k1, in->k2, in->tbl, in->steps};
            v->scalar_slot[v->num_scalar++] = i;
        } else {
            rewrite_instr(&vb, i, slots);
        }
        vb.writer[in->dst] = i;
    }
    variant_deps(&vb);
    variant_outputs_and_registers(&vb);
    free(vb.writer);
    free(vb.hoisted);
    free(vb.val_of);
    free(vb.last_use);
    free(vb.def_val);
    return v;
}

// the cached variant for mask, built on first use; NULL when the cache is
// full (the caller builds a private one)
// (build 0: only a cached one, else NULL)
static Variant *variant_get(const ExprProgram *cp, uint64_t mask, int build) {
    ExprProgram *p = (ExprProgram *)cp;  // the cache is the only state evaluation changes
    for (int s = 0; s < EXPR_VARIANTS; s++) {
        Variant *v = atomic_load_explicit(&p->variants[s], memory_order_acquire);
        if (!v && !build) return NULL;
        if (!v) {
            Variant *mine = variant_build(cp, mask), *expected = NULL;
            if (atomic_compare_exchange_strong_explicit(&p->variants[s], &expected, mine, memory_order_acq_rel,
                                                        memory_order_acquire))
                return mine;
            variant_free(mine);  // another thread filled the slot: look at what it holds
            v = expected;
        }
        if (v->mask == mask) return v;
    }
    return NULL;
}

// ---- evaluation

#define B EXPR_BLOCK

// bit u set: used symbol u has one value (bitwise) in every lane of the block
static uint64_t uniform_mask(const ExprProgram *p, const double *const *syms) {
    uint64_t mask = 0;
    for (int u = 0; u < p->num_used_syms; u++) {
        const uint64_t *col = (const uint64_t *)syms[p->used_syms[u]];
        uint64_t first = col[0], diff = (col[1] ^ first) | (col[B - 1] ^ first);
        if (diff) continue;  // a swept column mostly differs at once: no scan
        for (int j = 2; j < B - 1; j++) diff |= col[j] ^ first;
        if (!diff) mask |= (uint64_t)1 << u;
    }
    return mask;
}

// the same for the m candidates from base of the caller's columns (a padded
// tail repeats its last candidate, which changes nothing)
static uint64_t uniform_mask_at(const ExprProgram *p, const double *const *sym_columns, size_t base, size_t m) {
    uint64_t mask = 0;
    for (int u = 0; u < p->num_used_syms; u++) {
        const uint64_t *col = (const uint64_t *)(sym_columns[p->used_syms[u]] + base);
        uint64_t first = col[0], diff = 0;
        for (size_t j = 1; j < m; j++) diff |= col[j] ^ first;
        if (!diff) mask |= (uint64_t)1 << u;
    }
    return mask;
}

static void write_outputs(const Output *outs, int num_outs, const double *regs, const double *const *syms,
                          const double *val, double *const *out_columns, size_t base, size_t m) {
    for (int k = 0; k < num_outs; k++) {
        if (!out_columns[k]) continue;  // not wanted
        double *out = out_columns[k] + base;
        const Output *o = &outs[k];
        if (o->kind == OUT_CONST || o->kind == OUT_SCALAR) {
            double value = o->kind == OUT_CONST ? o->k : val[o->operand];
            for (size_t j = 0; j < m; j++) out[j] = value;
        } else {
            const double *src = o->operand >= 0 ? regs + (size_t)o->operand * B : syms[-o->operand - 1];
            memcpy(out, src, m * sizeof(double));
        }
    }
}

void expr_program_eval(const ExprProgram *p, const double *const *sym_columns,
                       double *const *out_columns, size_t n) {
    // regs: (num_regs, B), grown for a variant that needs more;
    // tail_syms: (num_used_syms, B) padded copy of the last partial block;
    // val: hoisted values, (num_code + num_used_syms,);
    // work: the current variant's code with its hoisted constants patched in
    size_t reg_cap = (size_t)p->num_regs + 1, work_cap = 0;
    double *regs = aligned_alloc(64, reg_cap * B * sizeof(double));
    double *tail_syms = aligned_alloc(64, ((size_t)p->num_used_syms + 1) * B * sizeof(double));
    const double **syms = calloc((size_t)p->num_syms + 1, sizeof *syms);
    double *val = NULL, *prev_uniform = NULL;
    Instr *work = NULL;
    if (!regs || !tail_syms || !syms) die_oom("evaluating an expression program");
    const Variant *current = NULL;  // the variant whose values val and work hold
    uint64_t prev_mask = 0;         // the previous block's uniform set
    Variant *private_variant = NULL;
    for (size_t base = 0; base < n; base += B) {
        size_t m = n - base < B ? n - base : B;
        if (m == B) {
            for (int u = 0; u < p->num_used_syms; u++) {
                int s = p->used_syms[u];
                syms[s] = sym_columns[s] + base;
            }
        } else {
            // the loops always run B lanes: pad the tail with its last candidate
            // (any value is harmless; repeating one keeps uniform columns uniform)
            for (int u = 0; u < p->num_used_syms; u++) {
                int s = p->used_syms[u];
                double *col = tail_syms + (size_t)u * B;
                memcpy(col, sym_columns[s] + base, m * sizeof(double));
                for (size_t j = m; j < B; j++) col[j] = col[m - 1];
                syms[s] = col;
            }
        }
        uint64_t mask = p->hoistable ? uniform_mask(p, syms) : 0;
        const Variant *cached = !mask ? NULL : current && current->mask == mask ? current : variant_get(p, mask, 0);
        // a variant not built yet is built only for a uniform set that lasts: one that is also
        // the set of the block before or after (building costs far more than one block; a
        // search's blocks that straddle groups of rows have sets seen once)
        int lasting = mask && (cached || mask == prev_mask);
        if (mask && !lasting && base + B < n)
            lasting = uniform_mask_at(p, sym_columns, base + B, n - base - B < B ? n - base - B : B) == mask;
        prev_mask = mask;
        if (!lasting) {
            expr_run_block(p->code, p->num_code, regs, syms, m);
            write_outputs(p->outs, p->num_outs, regs, syms, val, out_columns, base, m);
            continue;
        }
        if (!val) {
            val = calloc((size_t)p->num_code + p->num_used_syms + 1, sizeof *val);
            prev_uniform = calloc((size_t)p->num_used_syms + 1, sizeof *prev_uniform);
            if (!val || !prev_uniform) die_oom("evaluating an expression program");
        }
        const Variant *v = cached ? cached : variant_get(p, mask, 1);
        if (!v) {  // cache full: a private variant for this call
            if (!private_variant || private_variant->mask != mask) {
                variant_free(private_variant);
                private_variant = variant_build(p, mask);
                current = NULL;  // a new variant, maybe at the old one's address
            }
            v = private_variant;
        }
        // hoisted values: all of them for a variant just switched to, else
        // those depending on a uniform symbol whose value changed
        uint64_t changed = 0;
        for (int u = 0; u < p->num_used_syms; u++)
            if (((mask >> u) & 1) && memcmp(&prev_uniform[u], syms[p->used_syms[u]], sizeof(double)) != 0) {
                changed |= (uint64_t)1 << u;
                prev_uniform[u] = val[p->num_code + u] = syms[p->used_syms[u]][0];
            }
        if (v != current) {
            if ((size_t)v->num_regs + 1 > reg_cap) {
                free(regs);
                reg_cap = (size_t)v->num_regs + 1;
                regs = aligned_alloc(64, reg_cap * B * sizeof(double));
                if (!regs) die_oom("evaluating an expression program");
            }
            if ((size_t)v->num_code + 1 > work_cap) {
                free(work);
                work_cap = (size_t)v->num_code + 1;
                work = malloc(work_cap * sizeof *work);
                if (!work) die_oom("evaluating an expression program");
            }
            for (int u = 0; u < p->num_used_syms; u++)
                if ((mask >> u) & 1) prev_uniform[u] = val[p->num_code + u] = syms[p->used_syms[u]][0];
            memcpy(work, v->code, (size_t)v->num_code * sizeof *work);
            changed = ~(uint64_t)0;
        }
        if (changed) {
            expr_run_scalar(v->scalar, v->scalar_slot, v->scalar_deps, v->num_scalar, val, changed);
            for (int q = 0; q < v->num_patch; q++) {
                if (!(v->patch_deps[q] & changed) && v->patch_deps[q]) continue;
                const Patch *pt = &v->patch[q];
                Instr *w = &work[pt->instr];
                const Instr *orig = &v->code[pt->instr];
                if (pt->field == 0) w->k = val[pt->slot];
                else if (pt->field == 1) w->k1 = val[pt->slot];
                else if (pt->field == 2) w->k2 = val[pt->slot];
                else if (pt->field == PATCH_PRODUCT) w->k = val[pt->slot] * orig->k;
                else {  // PATCH_BRANCH: the select's pick for this block
                    int first = op_select(val[pt->slot], orig->k, 1.0, 0.0) > 0;
                    int branch_is_reg = op_reads(orig->op, first ? 1 : 2);
                    w->op = branch_is_reg ? PI_MOV : PI_FILL;
                    w->a = first ? orig->b : orig->c;
                    w->k = first ? w->k1 : w->k2;
                }
            }
            current = v;
        }
        expr_run_block(work, v->num_code, regs, syms, m);
        write_outputs(v->outs, p->num_outs, regs, syms, val, out_columns, base, m);
    }
    variant_free(private_variant);
    free(regs);
    free(tail_syms);
    free(syms);
    free(val);
    free(prev_uniform);
    free(work);
}

