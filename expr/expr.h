// Symbolic expressions of a stage configuration (docs/design.md §4): time and
// memory are written once as expressions of symbols (b, s, h, tp, dp, zero
// flags, ckpt, offload ratios, ...) and evaluated in batch over many
// candidate configurations.
//
// A context owns every node in one arena. Nodes are hash-consed: building an
// expression that already exists returns the existing handle, so equal
// subexpressions are one node and handles compare with ==.
//
// Simplification happens at construction time:
//   constant folding (same IEEE double operation as evaluation would do),
//   x+0 = x, x-0 = x, x*1 = x, x/1 = x, x*0 = 0, x-x = 0, 0/x = 0,
//   max(x,x) = min(x,x) = x, ceil/floor of a ceil/floor (or integer constant) is itself,
//   selects and max/min decided by declared symbol bounds (expr_sym_set_bounds),
//   select with a constant condition or equal branches picks a branch,
//   select(select(y, k1, k2), a, b) tests y itself (a flag as a condition),
//   commutative operands (+, *, max, min) sorted, so a*b and b*a are one node,
//   x - c becomes x + (-c) (exact in IEEE), constants inside nested sums and
//   products are gathered: 2*(3*x) = 6*x, (x+1)+2 = x+3,
//   an overlap window drops idle streams and folds when it has one stream
//   left or only constants (ex_overlap).
// Assumptions (documented contract): symbol values are finite, so x*0 = 0 and
// x-x = 0 hold. Gathering constants re-associates, which may differ from the
// unsimplified tree by an ulp; it does not change results between expr_eval
// and expr_program_eval, which run the same operations in the same order.
// Division is IEEE division (x/0 gives inf); ceil/floor are C's ceil/floor.
// Cost: a divide is several times slower than a multiply in batched
// evaluation (divisions by powers of two become multiplies by themselves);
// where an ulp does not matter, as for rates of a hardware profile, write
// ex_mul(x, ex_num(1 / rate)), which also merges with other constants.
#ifndef MIST_EXPR_H
#define MIST_EXPR_H
#include <stddef.h>
#include <stdint.h>

typedef struct ExprCtx ExprCtx;
typedef int32_t Expr;  // node handle (index into the context's arena)
#define EXPR_NONE ((Expr)-1)

ExprCtx *expr_ctx_new(void);
void expr_ctx_free(ExprCtx *ctx);
// An independent copy: the same nodes under the same handles, the same
// symbols and settings; building on in the copy gives exactly what building
// on in the original would (a shared prefix is built once and cloned).
ExprCtx *expr_ctx_clone(const ExprCtx *ctx);
size_t expr_ctx_num_nodes(const ExprCtx *ctx);  // nodes allocated so far
// While on (off by default), ex_add also merges like terms of nested sums and
// of sums scaled by constants: 2*y + 3*y = 5*y, (y*b + 1)*2 + y*b*4 =
// y*b*6 + 2. That re-associates; it is exact when every value involved is an
// integer below 2^53 (element, byte and FLOP counts of integer symbols), and
// may move other results by a few ulps (more after cancellation).
void expr_ctx_set_merge_like_terms(ExprCtx *ctx, int on);

// named symbol; the same name gives the same node; symbols are numbered
// 0, 1, ... in creation order (that index selects its value at evaluation)
Expr ex_sym(ExprCtx *ctx, const char *name);
int expr_sym_index(ExprCtx *ctx, const char *name);  // -1 if no such symbol
// Declare that symbol `name` only takes values >= lo (and > 0 when positive
// is set). Expressions built afterwards use it: a select whose condition is
// then positive for every allowed value picks its first branch, and
// max(y, c) / min(y, c) with y > c always fold to y / c. Evaluating with a
// value outside the declared range is a contract violation (results are
// unspecified). Lower bounds are propagated through +, *, /, max, min, ceil,
// floor and select with the rounding of the operations themselves (sound:
// rounding to nearest is monotone); products of positive values are assumed
// not to underflow to 0. Without a declaration a symbol is unbounded.
void expr_sym_set_bounds(ExprCtx *ctx, const char *name, double lo, int positive);
// The lower bound of e derived from the declarations (-inf: none); *positive
// (if not NULL) is set to 1 when e > 0 for every allowed value.
double expr_lower_bound(const ExprCtx *ctx, Expr e, int *positive);
int expr_num_syms(ExprCtx *ctx);
const char *expr_sym_name(ExprCtx *ctx, int i);      // NULL if out of range

Expr ex_num(ExprCtx *ctx, double v);
Expr ex_add(ExprCtx *ctx, Expr a, Expr b);
Expr ex_sub(ExprCtx *ctx, Expr a, Expr b);
Expr ex_mul(ExprCtx *ctx, Expr a, Expr b);
Expr ex_div(ExprCtx *ctx, Expr a, Expr b);
Expr ex_max(ExprCtx *ctx, Expr a, Expr b);
Expr ex_min(ExprCtx *ctx, Expr a, Expr b);
Expr ex_ceil(ExprCtx *ctx, Expr a);
Expr ex_floor(ExprCtx *ctx, Expr a);
Expr ex_select(ExprCtx *ctx, Expr cond, Expr a, Expr b);  // cond > 0 ? a : b
Expr ex_sum(ExprCtx *ctx, const Expr *terms, int n);      // terms[0] + ... (0 if n == 0)

// The overlap (interference) rule of docs/design.md §4 as one node: how long a
// window takes in which up to EXPR_OVERLAP_MAX streams with work in[i]
// seconds run at once, each slowed by the others. A stream whose work is at
// most EXPR_OVERLAP_EPS counts as idle (0). While the set A of busy streams
// has two or more members, every i in A runs factor[A][i] times slower (A a
// bit mask, bit i: stream i; factors finite and > 0), the first to finish
// sets the window w = min_{i in A} x_i factor[A][i], which is added to the
// total while each i in A keeps x_i - w * (1 / factor[A][i]) (finished if
// x_i factor[A][i] - w <= EXPR_OVERLAP_EPS); the last stream then runs alone
// and its rest is added. in[i] = EXPR_NONE: no work on stream i. Streams
// that are EXPR_NONE or constants <= EXPR_OVERLAP_EPS drop out at build time;
// all constants fold to a number, one stream left to in > eps ? in : 0.
// The factors are copied: the caller's table need not outlive the call.
#define EXPR_OVERLAP_MAX 4
#define EXPR_OVERLAP_SUBSETS (1 << EXPR_OVERLAP_MAX)
#define EXPR_OVERLAP_EPS 1e-12
Expr ex_overlap(ExprCtx *ctx, const double factor[EXPR_OVERLAP_SUBSETS][EXPR_OVERLAP_MAX],
                const Expr in[EXPR_OVERLAP_MAX]);

// A handle of EXPR_NONE (or out of range) as an operand is a programming
// error: the constructors print the caller's mistake and abort.

// value of e with symbol i = sym_values[i]
double expr_eval(ExprCtx *ctx, Expr e, const double *sym_values);
// readable infix ("max(b * 6, s / 2) + 1"); returns the length snprintf
// would have written (the text is truncated to len - 1 characters)
int expr_print(ExprCtx *ctx, Expr e, char *buf, size_t len);

// Several outputs compiled into one flat program: common subexpressions
// computed once, constants folded into instructions, registers reused once
// their value is dead. The program is independent of the context afterwards.
typedef struct ExprProgram ExprProgram;
ExprProgram *expr_compile(ExprCtx *ctx, const Expr *outputs, int n_outputs);
void expr_program_free(ExprProgram *p);
int expr_program_num_instructions(const ExprProgram *p);
int expr_program_num_registers(const ExprProgram *p);
int expr_program_num_syms(const ExprProgram *p);  // symbol columns it reads

// Batched evaluation over n candidates. sym_columns[i] points to n doubles
// for symbol i (column layout, i < expr_num_syms at compile time);
// out_columns[k] receives n doubles for output k (NULL: output k is not
// written; work only it needs still runs). Candidates go in blocks
// through a scratch register file allocated by each call, so concurrent
// calls on one program (one per thread) are safe. Results are bitwise equal to
// expr_eval of each output.
// Work that depends only on symbols whose column holds one value (bitwise)
// throughout a block of candidates runs once per block instead of once per
// candidate, and again only when such a value changes from block to block:
// batches that keep most symbols fixed and sweep a few (a search's) are
// evaluated faster, with the same results. The per-block programs for each
// set of fixed symbols are built on first use and cached in the program
// (thread-safe); one is built only for a set that lasts (also the set of the
// block before or after): a lone block runs the plain program. A call costs a
// few microseconds beyond its candidates.
void expr_program_eval(const ExprProgram *p, const double *const *sym_columns,
                       double *const *out_columns, size_t n);
// The instruction set the batched loops run on this CPU: "avx2" or
// "baseline" (the compiler's default target). The results are the same bits
// on each.
const char *expr_simd_name(void);
#endif
