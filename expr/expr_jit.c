// Stage programs as machine code (x86-64 Linux; AVX-512 or AVX2).
//
// Why: the block kernels (expr_block.c) run one instruction at a time over a
// block of 64 candidates, so every instruction loads its operands from and
// stores its result to the register file in memory: 8 vector loads and 8
// stores of 64 B per operand per block, 27 to 31 cycles per instruction on
// this project's Zen 4, whatever the arithmetic. Here a run of instructions
// becomes one function that takes a vector of candidates at a time (eight
// with AVX-512, four with AVX2) through the whole run with its values in
// vector registers (32 or 16): a value is loaded once from the register file
// (or its symbol column), stored once if something after the run reads it,
// and the arithmetic in between is one machine instruction per operation (a
// few for a select or a pick by level).
//
// Bitwise: every operation is the one the C loops compute, in the same order
// and with the same operands: vaddpd/vsubpd/vmulpd/vdivpd round as C does
// (no FMA, no reassociation), vmaxpd(a, b) is exactly a > b ? a : b and
// vminpd(a, b) exactly a < b ? a : b (NaN and signed zeros included: both
// return the second operand unless the comparison holds), ceil and floor are
// vrndscalepd's (vroundpd's) rounding up and down (ceil(-0.5) = -0 as in C),
// and a select is an ordered compare (false for NaN, as C's > and <) and a
// blend.
//
// Constants are read at run time from the instruction array the run is
// given (the hoisting variants patch them per block), the thresholds and
// values of a pick by level from its table. Overlap windows (their own
// kernels), and selects whose branch is picked per block, stay with the
// block kernels; the machine code runs between them.
//
// The code lives in pages mapped writable, then read-and-execute only. Where
// the system refuses that (or MIST_NO_JIT=1, or neither instruction set),
// nothing is built and the block kernels run everything: the same results.
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "expr/expr_program_internal.h"

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

// the instruction set of the machine code built from now on (isa_default)
static int jit_isa;
static atomic_int jit_after = EXPR_JIT_AFTER;
int expr_jit_set_after(int blocks) { return atomic_exchange(&jit_after, blocks); }

const ExprJit *expr_jit_slot_get(ExprJitSlot *slot, const Instr *code, int num_code, const unsigned char *picked) {
    ExprJit *j = atomic_load_explicit(&slot->jit, memory_order_acquire);
    if (j || !jit_isa) return j;
    // exactly one caller counts the block that reaches the threshold: it builds (or finds none can
    // be); past it, nothing is counted (no shared writes per block)
    int after = atomic_load_explicit(&jit_after, memory_order_relaxed);
    if (atomic_load_explicit(&slot->blocks, memory_order_relaxed) > after) return NULL;
    if (atomic_fetch_add_explicit(&slot->blocks, 1, memory_order_relaxed) != after) return NULL;
    j = expr_jit_build(code, num_code, picked);
    atomic_store_explicit(&slot->jit, j, memory_order_release);
    return j;
}

const char *expr_machine_code_name(void) {
    return jit_isa == EXPR_SIMD_AVX512 ? "avx512" : jit_isa == EXPR_SIMD_AVX2 ? "avx2" : "none";
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
int expr_jit_set_isa(int isa) {
    (void)isa;
    return EXPR_SIMD_NONE;
}
#else

// ---- x86-64 encoding (Intel SDM vol. 2: 2.3 the VEX prefix, 2.7 the EVEX prefix)

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

// A VEX.256.66 instruction (AVX, ymm0..15): the same operands as evex, no
// mask or broadcast; W0.
static void vex(Buf *o, int map, unsigned char opcode, int reg, int v, int rm, const Mem *m) {
    int vv = v < 0 ? 0 : v;
    int rx = m && m->index >= 0 ? (m->index >> 3) & 1 : 0;
    int rb = m ? (m->base >> 3) & 1 : (rm >> 3) & 1;
    put(o, 0xC4);
    put(o, (unsigned char)((!((reg >> 3) & 1)) << 7 | (!rx) << 6 | (!rb) << 5 | map));
    put(o, (unsigned char)((~vv & 15) << 3 | 1 << 2 | 1));  // W0, vvvv, L = 256, pp = 66
    put(o, opcode);
    modrm(o, reg, rm, m);
}

// the vector operations used (Intel SDM opcodes; .66 prefix, EVEX.512.W1 or VEX.256)
enum {
    OP_MOVUPD_LOAD = 0x10, OP_MOVUPD_STORE = 0x11, OP_MOVAPD = 0x28,
    OP_ADDPD = 0x58, OP_MULPD = 0x59, OP_SUBPD = 0x5C, OP_MINPD = 0x5D, OP_DIVPD = 0x5E, OP_MAXPD = 0x5F,
    OP_CMPPD = 0xC2, OP_XORPD = 0x57, OP_PXORQ = 0xEF,  // map 0F (vxorpd: VEX; vpxorq: EVEX)
    OP_BLENDMPD = 0x65, OP_BROADCASTSD = 0x19,          // map 0F38 (vblendmpd: EVEX)
    OP_RNDSCALEPD = 0x09, OP_BLENDVPD = 0x4B,           // map 0F3A (0x09: vroundpd under VEX; vblendvpd: VEX)
};
// vcmppd predicates (ordered, quiet: false for NaN, as C's < and >)
enum { CMP_LT_OQ = 0x11, CMP_GT_OQ = 0x1E };
// vrndscalepd / vroundpd: round up / down, precision exception suppressed
enum { ROUND_CEIL = 0x0A, ROUND_FLOOR = 0x09 };

// a 64-bit load of a GPR: mov dst, [base + disp32]
static void mov_gpr_load(Buf *o, int dst, int base, int32_t disp) {
    put(o, (unsigned char)(0x48 | ((dst >> 3) & 1) << 2 | ((base >> 3) & 1)));
    put(o, 0x8B);
    put(o, (unsigned char)(2 << 6 | (dst & 7) << 3 | (base & 7)));
    put32(o, disp);
}

// ---- the two instruction sets: AVX-512 (zmm0..31, eight candidates per
// vector, masks in k1, constants broadcast from memory into the operation)
// and AVX2 (ymm0..15, four candidates, masks in a vector register,
// constants broadcast into a register first)

typedef struct {
    int isa;           // EXPR_SIMD_AVX512 or EXPR_SIMD_AVX2
    int bytes;         // of a vector: 64 or 32
    int alloc;         // registers 0 .. alloc - 1 hold values
    int tmp, zero, mask;  // scratch, 0.0 in every lane, the AVX2 mask (AVX-512: k1)
} Isa;

static const Isa ISA_AVX512 = {EXPR_SIMD_AVX512, 64, 30, 30, 31, -1};
static const Isa ISA_AVX2 = {EXPR_SIMD_AVX2, 32, 13, 14, 15, 13};
enum { MAX_ALLOC = 30 };

typedef struct {
    Buf *o;
    const Isa *isa;
} Emit;

static int avx512(const Emit *e) { return e->isa->isa == EXPR_SIMD_AVX512; }

// dst = op(a, b), or with one source (v = -1: moves, rounding)
static void v_op(const Emit *e, int map, unsigned char op, int dst, int a, int b) {
    if (avx512(e)) evex(e->o, map, op, dst, a, b, NULL, 0, 0);
    else vex(e->o, map, op, dst, a, b, NULL);
}
static void v_load(const Emit *e, int dst, Mem m) {
    if (avx512(e)) evex(e->o, MAP_0F, OP_MOVUPD_LOAD, dst, -1, 0, &m, 0, 0);
    else vex(e->o, MAP_0F, OP_MOVUPD_LOAD, dst, -1, 0, &m);
}
static void v_store(const Emit *e, int src, Mem m) {
    if (avx512(e)) evex(e->o, MAP_0F, OP_MOVUPD_STORE, src, -1, 0, &m, 0, 0);
    else vex(e->o, MAP_0F, OP_MOVUPD_STORE, src, -1, 0, &m);
}
// dst = the double at m in every lane
static void v_bcast(const Emit *e, int dst, Mem m) {
    if (avx512(e)) evex(e->o, MAP_0F38, OP_BROADCASTSD, dst, -1, 0, &m, 0, 0);
    else vex(e->o, MAP_0F38, OP_BROADCASTSD, dst, -1, 0, &m);
}
// dst = op(a, the double at m)
static void v_op_m(const Emit *e, unsigned char op, int dst, int a, Mem m) {
    if (avx512(e)) {
        evex(e->o, MAP_0F, op, dst, a, 0, &m, 1, 0);
        return;
    }
    v_bcast(e, e->isa->tmp, m);
    v_op(e, MAP_0F, op, dst, a, e->isa->tmp);
}
// dst = op(the double at m, a)
static void v_m_op(const Emit *e, unsigned char op, int dst, int a, Mem m) {
    v_bcast(e, e->isa->tmp, m);
    v_op(e, MAP_0F, op, dst, e->isa->tmp, a);
}
// the mask = a pred b (b: a register, or the double at m when m is given)
static void v_cmp(const Emit *e, int pred, int a, int b, const Mem *m) {
    if (avx512(e)) {
        evex(e->o, MAP_0F, OP_CMPPD, 1, a, b, m, m != NULL, 0);
    } else {
        if (m) v_bcast(e, e->isa->tmp, *m), b = e->isa->tmp;
        vex(e->o, MAP_0F, OP_CMPPD, e->isa->mask, a, b, NULL);
    }
    put(e->o, (unsigned char)pred);
}
// dst = mask ? y : x (y: a register, or the double at m when m is given)
static void v_blend(const Emit *e, int dst, int x, int y, const Mem *m) {
    if (avx512(e)) {
        evex(e->o, MAP_0F38, OP_BLENDMPD, dst, x, y, m, m != NULL, 1);
        return;
    }
    if (m) v_bcast(e, e->isa->tmp, *m), y = e->isa->tmp;
    vex(e->o, MAP_0F3A, OP_BLENDVPD, dst, x, y, NULL);
    put(e->o, (unsigned char)(e->isa->mask << 4));  // the mask register, in the immediate's high bits
}
static void v_round(const Emit *e, int dst, int a, int mode) {
    v_op(e, MAP_0F3A, OP_RNDSCALEPD, dst, -1, a);
    put(e->o, (unsigned char)mode);
}

// ---- what each instruction reads, and where values live

// Which instructions the machine code runs: not the overlap windows (their
// own kernels); the caller also keeps the selects it picks per block, and
// an instruction reading a register nothing before it writes stays with the
// kernels.
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
    Emit e;
    const Flow *f;
    int end;
    int32_t *vreg_of;    // value -> vector register holding it (-1: none)
    int32_t *last_in;    // value -> its last reader in the run (-1: none)
    int free_regs[MAX_ALLOC], num_free;
} Seg;

static int vreg_take(Seg *s) {
    if (!s->num_free) abort();  // the run was cut so that this cannot happen (run_end)
    return s->free_regs[--s->num_free];
}

static Mem reg_mem(int32_t r) { return (Mem){RDI, RAX, r * EXPR_BLOCK * (int32_t)sizeof(double)}; }
static Mem const_mem(int i, size_t field) { return (Mem){RDX, -1, (int32_t)((size_t)i * sizeof(Instr) + field)}; }

// the vector register holding operand j of instruction i, loaded on its first read in the run
static int operand_vreg(Seg *s, int i, int j) {
    int v = s->f->src[4 * i + j];
    if (s->vreg_of[v] >= 0) return s->vreg_of[v];
    int z = vreg_take(s);
    const Instr *in = &s->f->code[i];
    int32_t operand = j == 0 ? in->a : j == 1 ? in->b : j == 2 ? in->c : in->e;
    if (operand >= 0) {
        v_load(&s->e, z, reg_mem(operand));
    } else {
        mov_gpr_load(s->e.o, R8, RSI, (int32_t)((-operand - 1) * (int32_t)sizeof(double *)));
        v_load(&s->e, z, (Mem){R8, RAX, 0});
    }
    s->vreg_of[v] = z;
    return z;
}

// the mask = cond + k > 0 (op_select: expr_select3 after the offset)
static void select_mask(const Emit *e, int cond, int i) {
    v_op_m(e, OP_ADDPD, e->isa->tmp, cond, const_mem(i, offsetof(Instr, k)));
    v_cmp(e, CMP_GT_OQ, e->isa->tmp, e->isa->zero, NULL);
}

static void emit_instr(Seg *s, int i) {
    const Instr *in = &s->f->code[i];
    const Emit *e = &s->e;
    int z[4] = {-1, -1, -1, -1};
    for (int j = 0; j < 4; j++)
        if (op_reads(in->op, j)) z[j] = operand_vreg(s, i, j);
    int d = vreg_take(s);  // before the operands are released: never aliases them
    const Mem K = const_mem(i, offsetof(Instr, k)), K1 = const_mem(i, offsetof(Instr, k1)),
              K2 = const_mem(i, offsetof(Instr, k2));
    const int tmp = e->isa->tmp;
    switch ((ProgOp)in->op) {
    case PI_ADD: v_op(e, MAP_0F, OP_ADDPD, d, z[0], z[1]); break;
    case PI_SUB: v_op(e, MAP_0F, OP_SUBPD, d, z[0], z[1]); break;
    case PI_MUL: v_op(e, MAP_0F, OP_MULPD, d, z[0], z[1]); break;
    case PI_DIV: v_op(e, MAP_0F, OP_DIVPD, d, z[0], z[1]); break;
    case PI_MAX: v_op(e, MAP_0F, OP_MAXPD, d, z[0], z[1]); break;
    case PI_MIN: v_op(e, MAP_0F, OP_MINPD, d, z[0], z[1]); break;
    case PI_ADD_K: v_op_m(e, OP_ADDPD, d, z[0], K); break;
    case PI_SUB_K: v_op_m(e, OP_SUBPD, d, z[0], K); break;
    case PI_MUL_K: v_op_m(e, OP_MULPD, d, z[0], K); break;
    case PI_DIV_K: v_op_m(e, OP_DIVPD, d, z[0], K); break;
    case PI_MAX_K: v_op_m(e, OP_MAXPD, d, z[0], K); break;
    case PI_MIN_K: v_op_m(e, OP_MINPD, d, z[0], K); break;
    case PI_K_SUB: v_m_op(e, OP_SUBPD, d, z[0], K); break;
    case PI_K_DIV: v_m_op(e, OP_DIVPD, d, z[0], K); break;
    case PI_K_MAX: v_m_op(e, OP_MAXPD, d, z[0], K); break;
    case PI_K_MIN: v_m_op(e, OP_MINPD, d, z[0], K); break;
    case PI_CEIL: v_round(e, d, z[0], ROUND_CEIL); break;
    case PI_FLOOR: v_round(e, d, z[0], ROUND_FLOOR); break;
    case PI_SELECT: select_mask(e, z[0], i), v_blend(e, d, z[2], z[1], NULL); break;
    case PI_SEL_KX: select_mask(e, z[0], i), v_blend(e, d, z[2], 0, &K1); break;
    case PI_SEL_XK: select_mask(e, z[0], i), v_bcast(e, d, K2), v_blend(e, d, d, z[1], NULL); break;
    case PI_SEL_KK: select_mask(e, z[0], i), v_bcast(e, d, K2), v_blend(e, d, d, 0, &K1); break;
    case PI_SEL_GT: v_cmp(e, CMP_GT_OQ, z[0], z[3], NULL), v_blend(e, d, z[2], z[1], NULL); break;
    case PI_FILL: v_bcast(e, d, K); break;
    case PI_MOV: v_op(e, MAP_0F, OP_MOVAPD, d, -1, z[0]); break;
    case PI_MULADD_K: v_op_m(e, OP_MULPD, d, z[0], K), v_op(e, MAP_0F, OP_ADDPD, d, d, z[1]); break;
    case PI_MULADD_KK: v_op_m(e, OP_MULPD, d, z[0], K), v_op_m(e, OP_ADDPD, d, d, K1); break;
    case PI_MAXMUL_KK:
        v_op_m(e, OP_MULPD, d, z[0], K), v_op_m(e, OP_MULPD, tmp, z[1], K1);
        v_op(e, MAP_0F, OP_MAXPD, d, d, tmp);
        break;
    case PI_ADD3: v_op(e, MAP_0F, OP_ADDPD, d, z[0], z[1]), v_op(e, MAP_0F, OP_ADDPD, d, d, z[2]); break;
    case PI_STEPS: case PI_STEPS_X: {
        // r = tail; for q = n - 1 .. 0: r = x < t[q] ? v[q] : r (expr_steps1)
        const ExprStepTable *t = in->steps;
        mov_gpr_load(e->o, R9, RDX, (int32_t)((size_t)i * sizeof(Instr) + offsetof(Instr, steps)));
        int r = in->op == PI_STEPS_X ? z[1] : d;
        if (in->op == PI_STEPS)
            v_bcast(e, d, (Mem){R9, -1, (int32_t)(offsetof(ExprStepTable, v) + (size_t)t->n * sizeof(double))});
        for (int q = t->n - 1; q >= 0; q--) {
            Mem mt = {R9, -1, (int32_t)(offsetof(ExprStepTable, t) + (size_t)q * sizeof(double))};
            Mem mv = {R9, -1, (int32_t)(offsetof(ExprStepTable, v) + (size_t)q * sizeof(double))};
            v_cmp(e, CMP_LT_OQ, z[0], 0, &mt);
            v_blend(e, d, r, 0, &mv);
            r = d;
        }
        break;
    }
    default: abort();  // not jittable(): never in a run
    }
    // the result: stored when anything after the run (or an output) reads it
    const Flow *f = s->f;
    if (f->last_read[i] >= s->end || f->final_writer[i]) v_store(e, d, reg_mem(in->dst));
    s->vreg_of[i] = d;
    // release what this instruction read last in the run, and a result nothing in the run reads
    for (int j = 0; j < 4; j++) {
        int v = z[j] >= 0 ? f->src[4 * i + j] : -1;
        if (v >= 0 && s->vreg_of[v] >= 0 && s->last_in[v] <= i) {
            s->free_regs[s->num_free++] = s->vreg_of[v];
            s->vreg_of[v] = -1;
        }
    }
    if (s->last_in[i] < 0) s->free_regs[s->num_free++] = d, s->vreg_of[i] = -1;
}

// Where a run starting at `start` ends: before the first instruction the
// machine code does not run, or before one that would need more than
// `alloc` live values. The count assumes every value lives until its last
// reader anywhere (the run's own code frees earlier, at its last reader in the
// run), so the run's code never needs more.
static int run_end(const Flow *f, int start, int alloc, int32_t *live_until, int32_t *touched) {
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
        if (live + need > alloc) break;
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

static void emit_run(Buf *o, const Isa *isa, const Flow *f, int start, int end, int32_t *vreg_of, int32_t *last_in) {
    Seg s = {{o, isa}, f, end, vreg_of, last_in, {0}, 0};
    for (int z = isa->alloc - 1; z >= 0; z--) s.free_regs[s.num_free++] = z;
    for (int i = start; i < end; i++)
        for (int j = 0; j < 4; j++)
            if (f->src[4 * i + j] >= 0) last_in[f->src[4 * i + j]] = i;
    // prologue: rax = 0 (the byte offset of the first lane), the zero register
    put(o, 0x31), put(o, 0xC0);
    if (isa->isa == EXPR_SIMD_AVX512) evex(o, MAP_0F, OP_PXORQ, isa->zero, isa->zero, isa->zero, NULL, 0, 0);
    else vex(o, MAP_0F, OP_XORPD, isa->zero, isa->zero, isa->zero, NULL);
    size_t top = o->n;
    for (int i = start; i < end; i++) emit_instr(&s, i);
    // rax += the vector's bytes; if rax < rcx (the lanes' bytes) go again
    put(o, 0x48), put(o, 0x83), put(o, 0xC0), put(o, (unsigned char)isa->bytes);
    put(o, 0x48), put(o, 0x39), put(o, 0xC8);
    put(o, 0x0F), put(o, 0x82), put32(o, (int32_t)top - (int32_t)(o->n + 4));
    put(o, 0xC5), put(o, 0xF8), put(o, 0x77);  // vzeroupper
    put(o, 0xC3);
    for (int i = start; i < end; i++) {
        last_in[i] = -1, vreg_of[i] = -1;
        for (int j = 0; j < 4; j++)
            if (f->src[4 * i + j] >= 0) last_in[f->src[4 * i + j]] = -1, vreg_of[f->src[4 * i + j]] = -1;
    }
}

// the instruction set of the machine code built from now on: AVX-512 where
// the CPU has it (and MIST_NO_AVX512 is not 1), else AVX2, else none; none
// with MIST_NO_JIT=1. Set at load time and by expr_jit_set_isa.
static int isa_default(void) {
    const char *no = getenv("MIST_NO_JIT");
    return no && !strcmp(no, "1") ? EXPR_SIMD_NONE : expr_simd_best(EXPR_SIMD_AVX512, 1);
}
__attribute__((constructor)) static void detect_jit(void) { jit_isa = isa_default(); }

int expr_jit_set_isa(int isa) {
    int had = jit_isa;
    jit_isa = isa < 0 ? isa_default() : expr_simd_best(isa, 0);
    return had;
}

ExprJit *expr_jit_build(const Instr *code, int n, const unsigned char *picked) {
    const Isa *isa = jit_isa == EXPR_SIMD_AVX512 ? &ISA_AVX512 : jit_isa == EXPR_SIMD_AVX2 ? &ISA_AVX2 : NULL;
    if (!isa || n <= 0) return NULL;
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
    int32_t *vreg_of = xmalloc((size_t)f.num_vals * sizeof *vreg_of);
    int32_t *last_in = xmalloc((size_t)f.num_vals * sizeof *last_in);
    for (int v = 0; v < f.num_vals; v++) live_until[v] = vreg_of[v] = last_in[v] = -1;
    size_t *offset = xmalloc(((size_t)n + 1) * sizeof *offset);
    Buf o = {0};
    int jitted = 0;
    for (int i = 0; i < n;) {
        int end = f.ok[i] ? run_end(&f, i, isa->alloc, live_until, touched) : i;
        if (end - i >= 2) {
            offset[j->num_pieces] = o.n;
            j->pieces[j->num_pieces++] = (Piece){i, end, NULL};
            emit_run(&o, isa, &f, i, end, vreg_of, last_in);
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
    free(writer), free(live_until), free(touched), free(vreg_of), free(last_in);
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
