// Stage programs as AVX-512 machine code (x86-64 Linux, CPUs with AVX-512F).
//
// Why: the block kernels (expr_block.c) run one instruction at a time over a
// block of 64 candidates, so every instruction loads its operands from and
// stores its result to the register file in memory: 8 vector loads and 8
// stores of 64 B per operand per block, 27 to 31 cycles per instruction on
// this project's Zen 4, whatever the arithmetic. Here a run of instructions
// becomes one function that takes eight candidates at a time through the
// whole run with its values in the 32 vector registers: a value is loaded
// once from the register file (or its symbol column), stored once if
// something after the run reads it, and the arithmetic in between is one
// machine instruction per operation (a few for a select or a pick by level).
//
// Bitwise: every operation is the one the C loops compute, in the same order
// and with the same operands: vaddpd/vsubpd/vmulpd/vdivpd round as C does
// (no FMA, no reassociation), vmaxpd(a, b) is exactly a > b ? a : b and
// vminpd(a, b) exactly a < b ? a : b (NaN and signed zeros included: both
// return the second operand unless the comparison holds), ceil and floor are
// vrndscalepd's rounding up and down (ceil(-0.5) = -0 as in C), and a select
// is an ordered compare (false for NaN, as C's > and <) and a blend.
//
// Constants are read at run time from the instruction array the run is
// given (the hoisting variants patch them per block), the thresholds and
// values of a pick by level from its table. Overlap windows (their own
// AVX-512 kernel), and selects whose branch is picked per block, stay with
// the block kernels; the machine code runs between them.
//
// The code lives in pages mapped writable, then read-and-execute only. Where
// the system refuses that (or MIST_NO_AVX512=1, or no AVX-512), nothing is
// built and the block kernels run everything: the same results.
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "planner/expr_program_internal.h"

#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__)
#include <sys/mman.h>
#include <unistd.h>
#define EXPR_JIT 1
#endif

typedef void (*JitFn)(double *regs, const double *const *syms, const Instr *code, size_t end_bytes);

typedef struct {
    int start, end;  // instructions [start, end)
    JitFn fn;        // NULL: the block kernels run them
} Piece;

struct ExprJit {
    Piece *pieces;
    int num_pieces;
    void *mem;  // the mapped code
    size_t mem_bytes;
};

void expr_jit_free(ExprJit *j) {
    if (!j) return;
#ifdef EXPR_JIT
    if (j->mem) munmap(j->mem, j->mem_bytes);
#endif
    free(j->pieces);
    free(j);
}

// set once at load time where the CPU has AVX-512 (and by expr_jit_set_enabled);
// MIST_NO_AVX512=1 builds none
static int jit_enabled;
static atomic_int jit_after = EXPR_JIT_AFTER;
int expr_jit_set_after(int blocks) { return atomic_exchange(&jit_after, blocks); }

const ExprJit *expr_jit_slot_get(ExprJitSlot *slot, const Instr *code, int num_code, const unsigned char *picked) {
    ExprJit *j = atomic_load_explicit(&slot->jit, memory_order_acquire);
    if (j || !jit_enabled) return j;
    // exactly one caller counts the block that reaches the threshold: it builds (or finds none can
    // be); past it, nothing is counted (no shared writes per block)
    int after = atomic_load_explicit(&jit_after, memory_order_relaxed);
    if (atomic_load_explicit(&slot->blocks, memory_order_relaxed) > after) return NULL;
    if (atomic_fetch_add_explicit(&slot->blocks, 1, memory_order_relaxed) != after) return NULL;
    j = expr_jit_build(code, num_code, picked);
    atomic_store_explicit(&slot->jit, j, memory_order_release);
    return j;
}

int expr_jit_num_runs(const ExprJit *j, int *instructions) {
    int runs = 0, covered = 0;
    for (int q = 0; j && q < j->num_pieces; q++)
        if (j->pieces[q].fn) runs++, covered += j->pieces[q].end - j->pieces[q].start;
    if (instructions) *instructions = covered;
    return runs;
}

void expr_jit_run_block(const ExprJit *j, const Instr *code, int num_code, double *regs, const double *const *syms,
                        size_t m) {
    if (!j) {
        expr_run_block(code, num_code, regs, syms, m);
        return;
    }
    // the same lane counts as expr_run_block: a quarter, a half or the whole block
    size_t lanes = m <= EXPR_BLOCK / 4 ? EXPR_BLOCK / 4 : m <= EXPR_BLOCK / 2 ? EXPR_BLOCK / 2 : EXPR_BLOCK;
    for (int q = 0; q < j->num_pieces; q++) {
        const Piece *p = &j->pieces[q];
        if (p->fn) p->fn(regs, syms, code, lanes * sizeof(double));
        else expr_run_block(code + p->start, p->end - p->start, regs, syms, m);
    }
}

#ifndef EXPR_JIT
ExprJit *expr_jit_build(const Instr *code, int num_code, const unsigned char *picked) {
    (void)code, (void)num_code, (void)picked;
    return NULL;
}
int expr_jit_set_enabled(int on) {
    (void)on;
    return 0;
}
#else

// ---- x86-64 encoding (Intel SDM vol. 2, 2.7: the EVEX prefix)

typedef struct {
    unsigned char *b;
    size_t n, cap;
} Buf;

static void put(Buf *o, unsigned char c) {
    if (o->n == o->cap) {
        o->cap = o->cap ? 2 * o->cap : 4096;
        o->b = realloc(o->b, o->cap);
        if (!o->b) die_oom("building machine code for a stage program");
    }
    o->b[o->n++] = c;
}
static void put32(Buf *o, int32_t v) {
    uint32_t u = (uint32_t)v;
    for (int i = 0; i < 4; i++) put(o, (unsigned char)(u >> (8 * i)));
}

enum { RAX = 0, RCX = 1, RDX = 2, RSI = 6, RDI = 7, R8 = 8, R9 = 9 };
enum { MAP_0F = 1, MAP_0F38 = 2, MAP_0F3A = 3 };

// a memory operand [base + index + disp] (index -1: none; scale 1)
typedef struct {
    int base, index;
    int32_t disp;
} Mem;

// ModRM (+ SIB + displacement) for reg and a register (rm >= 0, mem NULL) or memory operand
static void modrm(Buf *o, int reg, int rm, const Mem *m) {
    if (!m) {
        put(o, (unsigned char)(0xC0 | (reg & 7) << 3 | (rm & 7)));
        return;
    }
    // base is never rsp/r12 (which would need a SIB) nor rbp/r13 with no displacement
    int mod = m->disp == 0 && (m->base & 7) != 5 ? 0 : 2;
    if (m->index >= 0) {
        put(o, (unsigned char)(mod << 6 | (reg & 7) << 3 | 4));
        put(o, (unsigned char)((m->index & 7) << 3 | (m->base & 7)));
    } else {
        put(o, (unsigned char)(mod << 6 | (reg & 7) << 3 | (m->base & 7)));
    }
    if (mod == 2) put32(o, m->disp);  // disp32 is never scaled (only EVEX's disp8 is)
}

// An EVEX.512.66.W1 instruction: reg = ModRM.reg (a zmm or k register),
// v = the NDS source (-1: none), rm = a zmm (mem NULL) or the memory operand
// m (bcst: {1to8}, one double broadcast), k = the write mask (0: none).
static void evex(Buf *o, int map, unsigned char opcode, int reg, int v, int rm, const Mem *m, int bcst, int k) {
    int vv = v < 0 ? 0 : v;
    int rx = m ? (m->index >= 0 ? (m->index >> 3) & 1 : 0) : (rm >> 4) & 1;
    int rb = m ? (m->base >> 3) & 1 : (rm >> 3) & 1;
    put(o, 0x62);
    put(o, (unsigned char)((!((reg >> 3) & 1)) << 7 | (!rx) << 6 | (!rb) << 5 | (!((reg >> 4) & 1)) << 4 | map));
    put(o, (unsigned char)(1 << 7 | (~vv & 15) << 3 | 1 << 2 | 1));  // W1, vvvv, pp = 66
    put(o, (unsigned char)(2 << 5 | (bcst ? 1 : 0) << 4 | (!((vv >> 4) & 1)) << 3 | (k & 7)));  // L'L = 512
    put(o, opcode);
    modrm(o, reg, rm, m);
}

// the vector operations used (Intel SDM opcodes, all EVEX.512.66.W1)
enum {
    OP_MOVUPD_LOAD = 0x10, OP_MOVUPD_STORE = 0x11, OP_MOVAPD = 0x28,
    OP_ADDPD = 0x58, OP_MULPD = 0x59, OP_SUBPD = 0x5C, OP_MINPD = 0x5D, OP_DIVPD = 0x5E, OP_MAXPD = 0x5F,
    OP_CMPPD = 0xC2, OP_PXORQ = 0xEF,      // map 0F
    OP_BLENDMPD = 0x65, OP_BROADCASTSD = 0x19,  // map 0F38
    OP_RNDSCALEPD = 0x09,                  // map 0F3A
};
// vcmppd predicates (ordered, quiet: false for NaN; NGT_UQ: its negation)
enum { CMP_LT_OQ = 0x11, CMP_NGT_UQ = 0x1A, CMP_GT_OQ = 0x1E };
// vrndscalepd: round up / down, precision exception suppressed
enum { ROUND_CEIL = 0x0A, ROUND_FLOOR = 0x09 };

// a 64-bit load of a GPR: mov dst, [base + disp32]
static void mov_gpr_load(Buf *o, int dst, int base, int32_t disp) {
    put(o, (unsigned char)(0x48 | ((dst >> 3) & 1) << 2 | ((base >> 3) & 1)));
    put(o, 0x8B);
    put(o, (unsigned char)(2 << 6 | (dst & 7) << 3 | (base & 7)));
    put32(o, disp);
}

// ---- what each instruction reads, and where values live

enum { ZMM_TMP = 30, ZMM_ZERO = 31, ZMM_ALLOC = 30 };  // zmm0..29 hold values

// Which instructions the machine code runs: not the overlap windows, not
// the ones the caller keeps (selects picked per block), not one reading a
// register nothing before it writes.
static int jittable(const Instr *in) {
    switch ((ProgOp)in->op) {
    case PI_OVERLAP2: case PI_OVERLAP3: case PI_OVERLAP4: case PI_COUNT: return 0;
    default: return 1;
    }
}

typedef struct {
    const Instr *code;
    int n;
    int32_t *src;       // (n, 4): the value operand j of instruction i reads (-1: none)
    int32_t *last_read; // value -> the last instruction reading it (-1: none)
    unsigned char *final_writer;  // instruction -> no later instruction writes its register
    unsigned char *ok;  // instruction -> the machine code may run it
    int num_vals;       // values: instruction i's result is i, symbol s is n + s
} Flow;

static int operand_value(const Flow *f, const int32_t *writer, int32_t operand) {
    return operand >= 0 ? writer[operand] : f->n + (-operand - 1);
}

// ---- one run of instructions as a function

typedef struct {
    Buf *o;
    const Flow *f;
    int start, end;
    int32_t *zmm_of;     // value -> zmm holding it (-1: none)
    int32_t *last_in;    // value -> its last reader in [start, end) (-1: none)
    int free_zmm[ZMM_ALLOC], num_free;
} Seg;

static int zmm_take(Seg *s) {
    if (!s->num_free) abort();  // the run was cut so that this cannot happen (run_end)
    return s->free_zmm[--s->num_free];
}

static Mem reg_mem(int32_t r) { return (Mem){RDI, RAX, r * EXPR_BLOCK * (int32_t)sizeof(double)}; }
static Mem const_mem(int i, size_t field) { return (Mem){RDX, -1, (int32_t)((size_t)i * sizeof(Instr) + field)}; }

// the zmm holding operand j of instruction i, loaded on its first read in the run
static int operand_zmm(Seg *s, int i, int j) {
    int v = s->f->src[4 * i + j];
    if (s->zmm_of[v] >= 0) return s->zmm_of[v];
    int z = zmm_take(s);
    const Instr *in = &s->f->code[i];
    int32_t operand = j == 0 ? in->a : j == 1 ? in->b : j == 2 ? in->c : in->e;
    if (operand >= 0) {
        Mem m = reg_mem(operand);
        evex(s->o, MAP_0F, OP_MOVUPD_LOAD, z, -1, 0, &m, 0, 0);
    } else {
        mov_gpr_load(s->o, R8, RSI, (int32_t)((-operand - 1) * (int32_t)sizeof(double *)));
        Mem m = {R8, RAX, 0};
        evex(s->o, MAP_0F, OP_MOVUPD_LOAD, z, -1, 0, &m, 0, 0);
    }
    s->zmm_of[v] = z;
    return z;
}

// dst = op(a, constant field of instruction i)
static void op_k(Seg *s, unsigned char op, int dst, int a, int i, size_t field) {
    Mem m = const_mem(i, field);
    evex(s->o, MAP_0F, op, dst, a, 0, &m, 1, 0);
}
// dst = op(constant field of instruction i, a): the constant in a register first
static void k_op(Seg *s, unsigned char op, int dst, int a, int i, size_t field) {
    Mem m = const_mem(i, field);
    evex(s->o, MAP_0F38, OP_BROADCASTSD, ZMM_TMP, -1, 0, &m, 0, 0);
    evex(s->o, MAP_0F, op, dst, ZMM_TMP, a, NULL, 0, 0);
}
static void vop(Seg *s, unsigned char op, int dst, int a, int b) { evex(s->o, MAP_0F, op, dst, a, b, NULL, 0, 0); }
// k1 = cond + k > 0 (expr_select3 after op_select's offset), or its negation
static void select_mask(Seg *s, int cond, int i, int negate) {
    op_k(s, OP_ADDPD, ZMM_TMP, cond, i, offsetof(Instr, k));
    evex(s->o, MAP_0F, OP_CMPPD, 1, ZMM_TMP, ZMM_ZERO, NULL, 0, 0);
    put(s->o, negate ? CMP_NGT_UQ : CMP_GT_OQ);
}
// dst = k1 ? y : x, y a zmm or (i, field) a constant
static void blend(Seg *s, int dst, int x, int y) { evex(s->o, MAP_0F38, OP_BLENDMPD, dst, x, y, NULL, 0, 1); }
static void blend_k(Seg *s, int dst, int x, int i, size_t field) {
    Mem m = const_mem(i, field);
    evex(s->o, MAP_0F38, OP_BLENDMPD, dst, x, 0, &m, 1, 1);
}

static void emit_instr(Seg *s, int i) {
    const Instr *in = &s->f->code[i];
    int z[4] = {-1, -1, -1, -1};
    for (int j = 0; j < 4; j++)
        if (op_reads(in->op, j)) z[j] = operand_zmm(s, i, j);
    int d = zmm_take(s);  // before the operands are released: never aliases them
    const size_t K = offsetof(Instr, k), K1 = offsetof(Instr, k1), K2 = offsetof(Instr, k2);
    Buf *o = s->o;
    switch ((ProgOp)in->op) {
    case PI_ADD: vop(s, OP_ADDPD, d, z[0], z[1]); break;
    case PI_SUB: vop(s, OP_SUBPD, d, z[0], z[1]); break;
    case PI_MUL: vop(s, OP_MULPD, d, z[0], z[1]); break;
    case PI_DIV: vop(s, OP_DIVPD, d, z[0], z[1]); break;
    case PI_MAX: vop(s, OP_MAXPD, d, z[0], z[1]); break;
    case PI_MIN: vop(s, OP_MINPD, d, z[0], z[1]); break;
    case PI_ADD_K: op_k(s, OP_ADDPD, d, z[0], i, K); break;
    case PI_SUB_K: op_k(s, OP_SUBPD, d, z[0], i, K); break;
    case PI_MUL_K: op_k(s, OP_MULPD, d, z[0], i, K); break;
    case PI_DIV_K: op_k(s, OP_DIVPD, d, z[0], i, K); break;
    case PI_MAX_K: op_k(s, OP_MAXPD, d, z[0], i, K); break;
    case PI_MIN_K: op_k(s, OP_MINPD, d, z[0], i, K); break;
    case PI_K_SUB: k_op(s, OP_SUBPD, d, z[0], i, K); break;
    case PI_K_DIV: k_op(s, OP_DIVPD, d, z[0], i, K); break;
    case PI_K_MAX: k_op(s, OP_MAXPD, d, z[0], i, K); break;
    case PI_K_MIN: k_op(s, OP_MINPD, d, z[0], i, K); break;
    case PI_CEIL: case PI_FLOOR:
        evex(o, MAP_0F3A, OP_RNDSCALEPD, d, -1, z[0], NULL, 0, 0);
        put(o, in->op == PI_CEIL ? ROUND_CEIL : ROUND_FLOOR);
        break;
    case PI_SELECT: select_mask(s, z[0], i, 0), blend(s, d, z[2], z[1]); break;
    case PI_SEL_KX: select_mask(s, z[0], i, 0), blend_k(s, d, z[2], i, K1); break;
    case PI_SEL_XK: select_mask(s, z[0], i, 1), blend_k(s, d, z[1], i, K2); break;  // !(c > 0) ? k2 : b
    case PI_SEL_KK: {
        Mem m = const_mem(i, K2);
        select_mask(s, z[0], i, 0);
        evex(o, MAP_0F38, OP_BROADCASTSD, d, -1, 0, &m, 0, 0);
        blend_k(s, d, d, i, K1);
        break;
    }
    case PI_SEL_GT:
        evex(o, MAP_0F, OP_CMPPD, 1, z[0], z[3], NULL, 0, 0);
        put(o, CMP_GT_OQ);
        blend(s, d, z[2], z[1]);
        break;
    case PI_FILL: {
        Mem m = const_mem(i, K);
        evex(o, MAP_0F38, OP_BROADCASTSD, d, -1, 0, &m, 0, 0);
        break;
    }
    case PI_MOV: vop(s, OP_MOVAPD, d, -1, z[0]); break;
    case PI_MULADD_K: op_k(s, OP_MULPD, d, z[0], i, K), vop(s, OP_ADDPD, d, d, z[1]); break;
    case PI_MULADD_KK: op_k(s, OP_MULPD, d, z[0], i, K), op_k(s, OP_ADDPD, d, d, i, K1); break;
    case PI_MAXMUL_KK:
        op_k(s, OP_MULPD, d, z[0], i, K), op_k(s, OP_MULPD, ZMM_TMP, z[1], i, K1);
        vop(s, OP_MAXPD, d, d, ZMM_TMP);
        break;
    case PI_ADD3: vop(s, OP_ADDPD, d, z[0], z[1]), vop(s, OP_ADDPD, d, d, z[2]); break;
    case PI_STEPS: case PI_STEPS_X: {
        // r = tail; for q = n - 1 .. 0: r = x < t[q] ? v[q] : r (expr_steps1)
        const ExprStepTable *t = in->steps;
        mov_gpr_load(o, R9, RDX, (int32_t)((size_t)i * sizeof(Instr) + offsetof(Instr, steps)));
        int r = in->op == PI_STEPS_X ? z[1] : d;
        if (in->op == PI_STEPS) {
            Mem m = {R9, -1, (int32_t)(offsetof(ExprStepTable, v) + (size_t)t->n * sizeof(double))};
            evex(o, MAP_0F38, OP_BROADCASTSD, d, -1, 0, &m, 0, 0);
        }
        for (int q = t->n - 1; q >= 0; q--) {
            Mem mt = {R9, -1, (int32_t)(offsetof(ExprStepTable, t) + (size_t)q * sizeof(double))};
            Mem mv = {R9, -1, (int32_t)(offsetof(ExprStepTable, v) + (size_t)q * sizeof(double))};
            evex(o, MAP_0F, OP_CMPPD, 1, z[0], 0, &mt, 1, 0);
            put(o, CMP_LT_OQ);
            evex(o, MAP_0F38, OP_BLENDMPD, d, r, 0, &mv, 1, 1);
            r = d;
        }
        break;
    }
    default: abort();  // not jittable(): never in a run
    }
    // the result: stored when anything after the run (or an output) reads it
    const Flow *f = s->f;
    if (f->last_read[i] >= s->end || f->final_writer[i]) {
        Mem m = reg_mem(in->dst);
        evex(o, MAP_0F, OP_MOVUPD_STORE, d, -1, 0, &m, 0, 0);
    }
    s->zmm_of[i] = d;
    // release what this instruction read last in the run, and a result nothing in the run reads
    for (int j = 0; j < 4; j++) {
        int v = z[j] >= 0 ? f->src[4 * i + j] : -1;
        if (v >= 0 && s->zmm_of[v] >= 0 && s->last_in[v] <= i) {
            s->free_zmm[s->num_free++] = s->zmm_of[v];
            s->zmm_of[v] = -1;
        }
    }
    if (s->last_in[i] < 0) s->free_zmm[s->num_free++] = d, s->zmm_of[i] = -1;
}

// Where a run starting at `start` ends: before the first instruction the
// machine code does not run, or before one that would need more than
// ZMM_ALLOC live values. The count assumes every value lives until its last
// reader anywhere (the run's own code frees earlier, at its last reader in the
// run), so the run's code never needs more.
static int run_end(const Flow *f, int start, int32_t *live_until, int32_t *touched) {
    int live = 0, nt = 0;
    int i = start;
    for (; i < f->n && f->ok[i]; i++) {
        int need = 1;  // the result
        for (int j = 0; j < 4; j++) {
            int v = f->src[4 * i + j];
            if (v < 0 || live_until[v] >= 0) continue;
            int dup = 0;
            for (int q = 0; q < j; q++) dup |= f->src[4 * i + q] == v;
            need += !dup;
        }
        if (live + need > ZMM_ALLOC) break;
        for (int j = 0; j < 4; j++) {
            int v = f->src[4 * i + j];
            if (v >= 0 && live_until[v] < 0) live_until[v] = f->last_read[v], touched[nt++] = v, live++;
        }
        live_until[i] = f->last_read[i] < 0 ? i : f->last_read[i], touched[nt++] = i, live++;
        // release what is read last here (a value's last reader reads it), and a dead result
        for (int j = 0; j < 5; j++) {
            int v = j < 4 ? f->src[4 * i + j] : i;
            if (v >= 0 && live_until[v] == i) live_until[v] = -2, live--;
        }
    }
    for (int q = 0; q < nt; q++) live_until[touched[q]] = -1;
    return i;
}

static void emit_run(Buf *o, const Flow *f, int start, int end, int32_t *zmm_of, int32_t *last_in) {
    Seg s = {o, f, start, end, zmm_of, last_in, {0}, 0};
    for (int z = ZMM_ALLOC - 1; z >= 0; z--) s.free_zmm[s.num_free++] = z;
    for (int i = start; i < end; i++)
        for (int j = 0; j < 4; j++)
            if (f->src[4 * i + j] >= 0) last_in[f->src[4 * i + j]] = i;
    // prologue: rax = 0 (the byte offset of the first lane), zmm31 = 0
    put(o, 0x31), put(o, 0xC0);
    evex(o, MAP_0F, OP_PXORQ, ZMM_ZERO, ZMM_ZERO, ZMM_ZERO, NULL, 0, 0);
    size_t top = o->n;
    for (int i = start; i < end; i++) emit_instr(&s, i);
    // rax += 64; if rax < rcx (the lanes' bytes) go again
    put(o, 0x48), put(o, 0x83), put(o, 0xC0), put(o, 8 * sizeof(double));
    put(o, 0x48), put(o, 0x39), put(o, 0xC8);
    put(o, 0x0F), put(o, 0x82), put32(o, (int32_t)top - (int32_t)(o->n + 4));
    put(o, 0xC5), put(o, 0xF8), put(o, 0x77);  // vzeroupper
    put(o, 0xC3);
    for (int i = start; i < end; i++) {
        last_in[i] = -1, zmm_of[i] = -1;
        for (int j = 0; j < 4; j++)
            if (f->src[4 * i + j] >= 0) last_in[f->src[4 * i + j]] = -1, zmm_of[f->src[4 * i + j]] = -1;
    }
}

__attribute__((constructor)) static void detect_jit(void) { jit_enabled = expr_avx512_usable(1); }

int expr_jit_set_enabled(int on) {
    int had = jit_enabled;
    jit_enabled = on && expr_avx512_usable(0);
    return had;
}

ExprJit *expr_jit_build(const Instr *code, int n, const unsigned char *picked) {
    if (!jit_enabled || n <= 0) return NULL;
    int max_sym = -1, max_reg = -1;
    for (int i = 0; i < n; i++) {
        const int32_t ops[4] = {code[i].a, code[i].b, code[i].c, code[i].e};
        for (int j = 0; j < 4; j++)
            if (op_reads(code[i].op, j) && !(picked && picked[i] && j == 0)) {
                if (ops[j] < 0 && -ops[j] - 1 > max_sym) max_sym = -ops[j] - 1;
                if (ops[j] > max_reg) max_reg = ops[j];
            }
        if (code[i].dst > max_reg) max_reg = code[i].dst;
    }
    Flow f = {code, n, NULL, NULL, NULL, NULL, n + max_sym + 1};
    f.src = xmalloc((size_t)4 * n * sizeof *f.src);
    f.last_read = xmalloc((size_t)f.num_vals * sizeof *f.last_read);
    f.final_writer = xcalloc((size_t)n, 1);
    f.ok = xcalloc((size_t)n, 1);
    int32_t *writer = xmalloc(((size_t)max_reg + 1) * sizeof *writer);
    for (int r = 0; r <= max_reg; r++) writer[r] = -1;
    for (int v = 0; v < f.num_vals; v++) f.last_read[v] = -1;
    for (int i = 0; i < n; i++) {
        const Instr *in = &code[i];
        const int32_t ops[4] = {in->a, in->b, in->c, in->e};
        int is_picked = picked && picked[i];
        f.ok[i] = jittable(in) && !is_picked;
        for (int j = 0; j < 4; j++) {
            f.src[4 * i + j] = -1;
            if (!op_reads(in->op, j) || (is_picked && j == 0)) continue;
            int v = operand_value(&f, writer, ops[j]);
            if (v < 0) f.ok[i] = 0;  // a register nothing here writes: the block kernels read it
            else f.src[4 * i + j] = v, f.last_read[v] = i;
        }
        writer[in->dst] = i;
    }
    for (int r = 0; r <= max_reg; r++)
        if (writer[r] >= 0) f.final_writer[writer[r]] = 1;
    ExprJit *j = xcalloc(1, sizeof *j);
    j->pieces = xmalloc(((size_t)n + 1) * sizeof *j->pieces);
    int32_t *live_until = xmalloc((size_t)f.num_vals * sizeof *live_until);
    int32_t *touched = xmalloc(((size_t)5 * n + 1) * sizeof *touched);
    int32_t *zmm_of = xmalloc((size_t)f.num_vals * sizeof *zmm_of);
    int32_t *last_in = xmalloc((size_t)f.num_vals * sizeof *last_in);
    for (int v = 0; v < f.num_vals; v++) live_until[v] = zmm_of[v] = last_in[v] = -1;
    size_t *offset = xmalloc(((size_t)n + 1) * sizeof *offset);
    Buf o = {0};
    int jitted = 0;
    for (int i = 0; i < n;) {
        int end = f.ok[i] ? run_end(&f, i, live_until, touched) : i;
        if (end - i >= 2) {
            offset[j->num_pieces] = o.n;
            j->pieces[j->num_pieces++] = (Piece){i, end, NULL};
            emit_run(&o, &f, i, end, zmm_of, last_in);
            jitted++;
            i = end;
            continue;
        }
        // one instruction, or one the machine code does not run: the block kernels', merged
        // into the kernels' piece before it
        end = i + 1;
        Piece *last = j->num_pieces ? &j->pieces[j->num_pieces - 1] : NULL;
        if (last && last->end == i && offset[j->num_pieces - 1] == (size_t)-1) last->end = end;
        else offset[j->num_pieces] = (size_t)-1, j->pieces[j->num_pieces++] = (Piece){i, end, NULL};
        i = end;
    }
    free(writer), free(live_until), free(touched), free(zmm_of), free(last_in);
    free(f.src), free(f.last_read), free(f.final_writer), free(f.ok);
    if (!jitted) {
        free(offset), free(o.b);
        expr_jit_free(j);
        return NULL;
    }
    long page = sysconf(_SC_PAGESIZE);
    size_t bytes = (o.n + (size_t)page - 1) / (size_t)page * (size_t)page;
    void *mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) {
        free(offset), free(o.b);
        expr_jit_free(j);
        return NULL;
    }
    memcpy(mem, o.b, o.n);
    if (mprotect(mem, bytes, PROT_READ | PROT_EXEC) != 0) {  // the system forbids it: the kernels run all
        munmap(mem, bytes);
        free(offset), free(o.b);
        expr_jit_free(j);
        return NULL;
    }
    j->mem = mem, j->mem_bytes = bytes;
    for (int q = 0; q < j->num_pieces; q++)
        if (offset[q] != (size_t)-1) {
            void *entry = (unsigned char *)mem + offset[q];
            memcpy(&j->pieces[q].fn, &entry, sizeof entry);
        }
    free(offset), free(o.b);
    return j;
}
#endif
