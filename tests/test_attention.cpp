// Attention: masks against an independent reference, fully masked rows, fused kernels against the
// composed graphs they replace, runtime errors, readable weights, and the layout ops attention uses.
#include "attention_fixture.hpp"
#include "gradcheck.hpp"
#include "pool_threads.hpp"

#include <random>

using namespace ctg;
using namespace ctg::testing::attn;
using ctg::testing::check_gradients;

namespace {

std::vector<double> random_values(std::size_t count, unsigned seed, double lo = -2, double hi = 2) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(lo, hi);
    std::vector<double> v(count);
    for (auto& x : v) x = u(rng);
    return v;
}

// Runs masked_softmax(S, mask) on random scores and compares with the host reference.
template <attention_mask Mask>
void check_mask_values(Mask mask, const visibility& vis, const std::vector<index_t>& len = {2, 5},
                       const std::vector<index_t>& mat = {}) {
    auto p = masked_softmax(S{}, mask);
    auto prog = compile<double, options{.inference = true}>(p);
    const std::size_t batches = 2;
    const auto s = random_values(batches * n * m, 11);
    prog.feed("s", s.data(), rshape{3, {batches, n, m}});
    if constexpr (decltype(prog)::template has_input<"len">)
        prog.feed("len", len.data(), rshape{1, {batches}});
    if constexpr (decltype(prog)::template has_input<"mat">)
        prog.feed("mat", mat.data(), rshape{2, {n, m}});
    prog.forward();
    const auto want = reference_weights(s, batches, n, m, vis);
    auto got = prog.template output<0>();
    for (std::size_t k = 0; k < want.size(); ++k) {
        INFO("element " << k);
        REQUIRE(std::isfinite(got.data()[k]));
        CHECK(got.data()[k] == Approx(want[k]).margin(1e-14));
    }
}

}  // namespace

TEST_CASE("masks: each visibility set matches an independent reference", "[attention]") {
    // n = 4 queries against m = 5 keys: query i sits at key position i + 1 (aligned at the end).
    check_mask_values(no_mask{}, [](auto, auto, auto) { return true; });
    check_mask_values(causal{}, [](auto, auto i, auto j) { return (long long)j <= position(i, n, m); });
    check_mask_values(local_window<1>{}, [](auto, auto i, auto j) { return std::abs((long long)j - position(i, n, m)) <= 1; });
    check_mask_values(local_window<2, window::past>{}, [](auto, auto i, auto j) {
        const long long p = position(i, n, m);
        return (long long)j <= p && (long long)j >= p - 2;
    });
    check_mask_values(visible_if<even_or_self>{}, [](auto, auto i, auto j) {
        return even_or_self::visible(std::size_t(position(i, n, m)), j);
    });
    check_mask_values(key_padding(Len{}), [](auto b, auto, auto j) { return j < (b == 0 ? 2u : 5u); });
    const std::vector<index_t> mat = {1, 0, 1, 0, 0,  0, 0, 0, 0, 0,  1, 1, 1, 1, 1,  0, 0, 0, 1, 0};
    check_mask_values(mask_matrix(Mat{}), [&](auto, auto i, auto j) { return mat[i * m + j] != 0; }, {2, 5}, mat);
    check_mask_values(causal{} && key_padding(Len{}), [](auto b, auto i, auto j) {
        return (long long)j <= position(i, n, m) && j < (b == 0 ? 2u : 5u);
    });
    check_mask_values(local_window<1>{} && mask_matrix(Mat{}), [&](auto, auto i, auto j) {
        return std::abs((long long)j - position(i, n, m)) <= 1 && mat[i * m + j] != 0;
    }, {2, 5}, mat);
}

TEST_CASE("masks: a row with nothing visible is zeros with zero gradient, never NaN", "[attention]") {
    // Causal with more queries (6) than keys (3): queries 0..2 sit before the first key.
    using Sq = input<"s", B, 6, 3>;
    auto p = masked_softmax(Sq{}, causal{});
    auto prog = compile<double, options{.input_grads = true}>(sum(mul(p, input<"g", B, 6, 3>{})));
    prog.poison_arena(true);
    const auto s = random_values(2 * 6 * 3, 3), g = random_values(2 * 6 * 3, 4);
    prog.feed("s", s.data(), rshape{3, {2, 6, 3}});
    prog.feed("g", g.data(), rshape{3, {2, 6, 3}});
    prog.forward();
    prog.backward();
    auto w = prog.value_of(p);
    auto gs = prog.input_grad<"s">();
    for (std::size_t b = 0; b < 2; ++b)
        for (std::size_t i = 0; i < 6; ++i) {
            double row = 0;
            for (std::size_t j = 0; j < 3; ++j) {
                REQUIRE(std::isfinite(w(b, i, j)));
                REQUIRE(std::isfinite(gs(b, i, j)));
                row += w(b, i, j);
                if (i < 3) {
                    CHECK(w(b, i, j) == 0.0);
                    CHECK(gs(b, i, j) == 0.0);
                }
            }
            CHECK(row == Approx(i < 3 ? 0.0 : 1.0));
        }
    // And by finite differences, the empty rows included.
    CHECK(check_gradients(masked_softmax(Sq{}, causal{}), {.dims = {{'B', 2}}}) > 0);
    CHECK(check_gradients(attention(input<"q", B, 6, 3>{}, input<"k", B, 3, 3>{}, input<"v", B, 3, 2>{}, causal{}),
                          {.dims = {{'B', 2}}}) > 0);
}

TEST_CASE("masked_softmax equals softmax(S + M) with an additive mask, values and gradients", "[attention]") {
    // The composed form: M = 0 where visible, -1e30 elsewhere, fed as an input (every row keeps at
    // least one key here, so softmax(S + M) is defined).
    using M = input<"madd", B, n, m>;
    auto fused = sum(mul(masked_softmax(S{}, causal{} && key_padding(Len{})), input<"g", B, n, m>{}));
    auto composed = sum(mul(softmax(S{} + M{}), input<"g", B, n, m>{}));
    auto pf = compile<double, options{.input_grads = true}>(fused);
    auto pc = compile<double, options{.input_grads = true}>(composed);
    const auto s = random_values(2 * n * m, 21), g = random_values(2 * n * m, 22);
    const std::vector<index_t> len = {3, 5};
    std::vector<double> madd(2 * n * m);
    for (std::size_t b = 0; b < 2; ++b)
        for (std::size_t i = 0; i < n; ++i)
            for (std::size_t j = 0; j < m; ++j)
                madd[(b * n + i) * m + j] = ((long long)j <= position(i, n, m) && j < std::size_t(len[b])) ? 0.0 : -1e30;
    pf.feed("s", s.data(), rshape{3, {2, n, m}});
    pf.feed("g", g.data(), rshape{3, {2, n, m}});
    pf.feed("len", len.data(), rshape{1, {2}});
    pc.feed("s", s.data(), rshape{3, {2, n, m}});
    pc.feed("g", g.data(), rshape{3, {2, n, m}});
    pc.feed("madd", madd.data(), rshape{3, {2, n, m}});
    CHECK(pf.forward() == Approx(pc.forward()).epsilon(1e-13));
    pf.backward();
    pc.backward();
    auto gf = pf.input_grad<"s">();
    auto gc = pc.input_grad<"s">();
    for (std::size_t k = 0; k < gf.size(); ++k) CHECK(gf.data()[k] == Approx(gc.data()[k]).margin(1e-13));
}

namespace {
// Loss and every gradient (parameters and Q, K, V) of two graphs that should be the same function.
template <class A, class Bx>
void check_same_function(A a, Bx b, double tol, unsigned seed) {
    auto pa = compile<double, options{.input_grads = true}>(sum(mul(a, input<"g", B, n, dv>{})));
    using PB = decltype(compile<double, options{.input_grads = true}>(sum(mul(b, input<"g", B, n, dv>{}))));
    PB pb(pa.shared_params());  // the same weights
    pa.params().init(seed);
    std::mt19937_64 rng(seed);
    auto fill = [&](auto& p, auto& q, const char* name, std::size_t r, std::size_t c) {
        const auto v = random_values(2 * r * c, unsigned(rng()));
        p.feed(name, v.data(), rshape{3, {2, r, c}});
        q.feed(name, v.data(), rshape{3, {2, r, c}});
    };
    fill(pa, pb, "q", n, d);
    fill(pa, pb, "k", m, d);
    fill(pa, pb, "v", m, dv);
    fill(pa, pb, "g", n, dv);
    const std::vector<index_t> len = {2, 5};
    const std::vector<double> ones(n, 1.0), ones_m(m, 1.0);
    auto extras = [&](auto& p) {
        using P = std::remove_reference_t<decltype(p)>;
        if constexpr (P::template has_input<"len">) p.feed("len", len.data(), rshape{1, {2}});
        if constexpr (P::template has_input<"ones">) p.feed("ones", ones.data(), rshape{2, {1, n}});
        if constexpr (P::template has_input<"ones_m">) p.feed("ones_m", ones_m.data(), rshape{2, {1, m}});
    };
    extras(pa);
    extras(pb);
    pa.zero_grad();
    const double la = pa.forward();
    pa.backward();
    const std::vector<double> ga(pa.params().grads().begin(), pa.params().grads().end());
    const auto gqa = xt::eval(pa.template input_grad<"q">()), gka = xt::eval(pa.template input_grad<"k">()),
               gva = xt::eval(pa.template input_grad<"v">());
    pb.zero_grad();
    const double lb = pb.forward();
    pb.backward();
    CHECK(la == Approx(lb).epsilon(tol));
    for (std::size_t i = 0; i < ga.size(); ++i) CHECK(ga[i] == Approx(pb.params().grads()[i]).margin(tol));
    auto gqb = pb.template input_grad<"q">(), gkb = pb.template input_grad<"k">(), gvb = pb.template input_grad<"v">();
    for (std::size_t i = 0; i < gqa.size(); ++i) CHECK(gqa.data()[i] == Approx(gqb.data()[i]).margin(tol));
    for (std::size_t i = 0; i < gka.size(); ++i) CHECK(gka.data()[i] == Approx(gkb.data()[i]).margin(tol));
    for (std::size_t i = 0; i < gva.size(); ++i) CHECK(gva.data()[i] == Approx(gvb.data()[i]).margin(tol));
}
}  // namespace

TEST_CASE("fused scaled-dot weights equal the composed graph, values and gradients", "[attention]") {
    // Fused: attention() picks scaled_dot_score::weights. Composed: the score written out, then masked_softmax.
    auto composed = [](auto mask) {
        return matmul(masked_softmax(scaled_dot_score::scores(Q{}, K{}), mask), V{});
    };
    check_same_function(attention(Q{}, K{}, V{}), composed(no_mask{}), 1e-12, 1);
    check_same_function(attention(Q{}, K{}, V{}, causal{}), composed(causal{}), 1e-12, 2);
    check_same_function(attention(Q{}, K{}, V{}, causal{} && key_padding(Len{})), composed(causal{} && key_padding(Len{})),
                        1e-12, 3);
    check_same_function(attention(Q{}, K{}, V{}, visible_if<even_or_self>{}), composed(visible_if<even_or_self>{}), 1e-12, 4);
    // Dot and bilinear go through the same fused op.
    check_same_function(attention(Q{}, K{}, V{}, dot_score{}, causal{}),
                        matmul(masked_softmax(matmul(Q{}, transpose(K{})), causal{}), V{}), 1e-12, 5);
    using W = param<"W", d, d>;
    check_same_function(attention(Q{}, K{}, V{}, bilinear_score<"W", d, d>{}, local_window<1>{}),
                        matmul(masked_softmax(matmul(matmul(Q{}, W{}), transpose(K{})), local_window<1>{}), V{}), 1e-12, 6);
}

namespace {
// Every score a row may see lies in its row block and in a column block whose rows hold the row;
// returns the scores the blocks compute.
template <class Mask>
std::size_t covered_scores(std::size_t n, std::size_t m) {
    const op_io<double, 2> io;  // (these masks have no operands)
    const ops::masked_rows<Mask, double, 2> rows(io, rshape{3, {2, n, m}});
    const ops::score_blocks r = rows.row_blocks(1), c = rows.column_blocks(r);
    REQUIRE(r.count >= 1);
    REQUIRE(r.count <= ops::score_blocks::max_row_blocks);
    std::size_t computed = 0, next_row = 0, next_col = 0;
    for (std::size_t b = 0; b < r.count; ++b) {
        const ops::score_block& x = r.at[b];
        CHECK(x.r0 == next_row);  // the row blocks tile the rows, in order
        next_row = x.r1;
        computed += (x.r1 - x.r0) * (x.c1 - x.c0);
        for (std::size_t i = x.r0; i < x.r1; ++i) {
            const auto [lo, hi] = rows.range(n + i);
            if (hi > lo) CHECK((x.c0 <= lo && hi <= x.c1));
        }
    }
    CHECK(next_row == n);
    for (std::size_t b = 0; b < c.count; ++b) {
        CHECK(c.at[b].c0 == next_col);  // the column blocks tile the keys
        next_col = c.at[b].c1;
    }
    CHECK(next_col == m);
    for (std::size_t i = 0; i < n; ++i) {
        const auto [lo, hi] = rows.range(n + i);
        for (std::size_t b = 0; b < c.count; ++b)
            if (std::max(lo, c.at[b].c0) < std::min(hi, c.at[b].c1)) CHECK((c.at[b].r0 <= i && i < c.at[b].r1));
    }
    return computed;
}
}  // namespace

TEST_CASE("masked rows: attention's blocks hold every score a row may see and skip what the mask hides", "[attention]") {
    // A causal 256 x 256 matrix: four row blocks of 64 rows, 5/8 of the scores.
    const op_io<double, 2> io;
    const ops::masked_rows<causal, double, 2> square(io, rshape{3, {2, 256, 256}});
    const ops::score_blocks r = square.row_blocks(0), c = square.column_blocks(r);
    REQUIRE(r.count == 4);
    REQUIRE(c.count == 4);
    for (std::size_t b = 0; b < 4; ++b) {
        CHECK((r.at[b].r0 == 64 * b && r.at[b].r1 == 64 * (b + 1) && r.at[b].c0 == 0 && r.at[b].c1 == 64 * (b + 1)));
        CHECK((c.at[b].c0 == 64 * b && c.at[b].c1 == 64 * (b + 1) && c.at[b].r0 == 64 * b && c.at[b].r1 == 256));
    }
    CHECK(covered_scores<causal>(256, 256) == 256 * 256 * 5 / 8);
    // 300 queries on 130 keys: queries 0-169 see nothing (one block without columns), and each key
    // is summed over the rows from the first block that sees it.
    const ops::masked_rows<causal, double, 2> tall(io, rshape{2, {300, 130}});
    const ops::score_blocks t = tall.row_blocks(0), tc = tall.column_blocks(t);
    REQUIRE(t.count == 4);
    CHECK((t.at[0].r0 == 0 && t.at[0].r1 == 120 && t.at[0].c1 == t.at[0].c0));
    CHECK((t.at[1].r0 == 120 && t.at[1].c0 == 0 && t.at[1].c1 == 10));
    CHECK((t.at[2].r0 == 180 && t.at[2].c1 == 70));
    CHECK((t.at[3].r0 == 240 && t.at[3].r1 == 300 && t.at[3].c1 == 130));
    REQUIRE(tc.count == 3);
    CHECK((tc.at[0].c1 == 10 && tc.at[0].r0 == 120 && tc.at[1].c1 == 70 && tc.at[1].r0 == 180 && tc.at[2].r0 == 240));
    // Without a mask: the whole matrix, one block.
    CHECK(covered_scores<no_mask>(200, 300) == 200 * 300);
    const op_io<double, 2> none;
    CHECK(ops::masked_rows<no_mask, double, 2>(none, rshape{3, {2, 200, 300}}).row_blocks(0).count == 1);
    // Other shapes and masks: every visible score covered (the checks inside covered_scores), and
    // fewer scores computed than the whole matrix, except where every block's rows together see
    // every key: causal with one query (the last position), and a 40-key window over 70 x 70 (two
    // blocks of 35 rows, each reaching 40 keys both ways). A mask known only by visible() keeps the
    // whole matrix.
    for (const auto& [nq, mk] : {std::pair<std::size_t, std::size_t>{70, 70}, {1100, 1100}, {130, 300}, {300, 130}, {1, 257}}) {
        INFO("n " << nq << ", m " << mk);
        const std::size_t whole = nq * mk, causal_scores = covered_scores<causal>(nq, mk),
                          window_scores = covered_scores<local_window<40>>(nq, mk);
        if (nq == 1) CHECK(causal_scores == whole);
        else CHECK(causal_scores < whole);
        if (nq == 70) CHECK(window_scores == whole);
        else CHECK(window_scores < whole);
        CHECK(covered_scores<local_window<100, window::past>>(nq, mk) < nq * mk);
        CHECK(covered_scores<visible_if<even_or_self>>(nq, mk) == nq * mk);
    }
    CHECK(covered_scores<causal>(1100, 1100) < 1100 * 1100 * 6 / 10);
    CHECK(covered_scores<local_window<40>>(1100, 1100) < 1100 * 1100 / 4);
}

TEST_CASE("fused scaled-dot weights in row blocks equal the composed graph: heads, padding, n != m", "[attention]") {
    // The fused op computes only the blocks of each score matrix that its rows may see; here with
    // several blocks per matrix, a length per sequence (keys no row sees), two heads per sequence,
    // n < m and n > m (causal rows that see nothing).
    constexpr dim N = dyn('N'), Mk = dyn('M');
    constexpr int H = 2, dk = 8, dval = 3;
    using Qh = input<"q", B, H, N, dk>;
    using Kh = input<"k", B, H, Mk, dk>;
    using Vh = input<"v", B, H, Mk, dval>;
    using G = input<"g", B, H, N, dval>;
    const auto mask = causal{} && key_padding(Len{});
    auto fused = compile<double, options{.input_grads = true}>(sum(mul(attention(Qh{}, Kh{}, Vh{}, mask), G{})));
    auto composed = compile<double, options{.input_grads = true}>(
        sum(mul(matmul(masked_softmax(scaled_dot_score::scores(Qh{}, Kh{}), mask), Vh{}), G{})));
    struct size_case {
        std::size_t n, m;
        std::vector<index_t> len;
    };
    for (const size_case& c : {size_case{200, 200, {200, 67}}, size_case{130, 300, {300, 1}}, size_case{300, 130, {100, 130}}}) {
        INFO("n " << c.n << ", m " << c.m);
        const auto q = random_values(2 * H * c.n * dk, 31), k = random_values(2 * H * c.m * dk, 32),
                   v = random_values(2 * H * c.m * dval, 33), g = random_values(2 * H * c.n * dval, 34);
        const auto feed = [&](auto& p) {
            p.feed("q", q.data(), rshape{4, {2, H, c.n, dk}});
            p.feed("k", k.data(), rshape{4, {2, H, c.m, dk}});
            p.feed("v", v.data(), rshape{4, {2, H, c.m, dval}});
            p.feed("g", g.data(), rshape{4, {2, H, c.n, dval}});
            p.feed("len", c.len.data(), rshape{1, {2}});
        };
        feed(fused);
        feed(composed);
        CHECK(fused.forward() == Approx(composed.forward()).epsilon(1e-12));
        fused.backward();
        composed.backward();
        const auto same = [](const auto& a, const auto& b) {
            double worst = 0;
            for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a.data()[i] - b.data()[i]));
            return worst;
        };
        CHECK(same(fused.input_grad<"q">(), composed.input_grad<"q">()) <= 1e-12);
        CHECK(same(fused.input_grad<"k">(), composed.input_grad<"k">()) <= 1e-12);
        CHECK(same(fused.input_grad<"v">(), composed.input_grad<"v">()) <= 1e-12);
    }
}

TEST_CASE("attention over heads side by side equals split, attend, merge: values, weights and gradients", "[attention]") {
    // nn::attention_over_heads reads each head's columns of q, k, v (B, n, H d) in place and writes
    // its output columns: the fused ops with Heads > 0. Against the heads made a batch axis
    // (split_heads, the fused ops with Heads = 0, merge_heads), under masks with several row blocks
    // per matrix, keys no row sees and n != m; the unscaled dot score too, and a score without
    // fused weights (bilinear: the same split, attend, merge). The products are the same sums over
    // the same elements: equal to rounding.
    constexpr dim N = dyn('N'), Mk = dyn('M');
    constexpr int H = 3, dk = 4, dval = 2;
    using Q = input<"q", B, N, H * dk>;
    using K = input<"k", B, Mk, H * dk>;
    using V = input<"v", B, Mk, H * dval>;
    using G = input<"g", B, N, H * dval>;
    using Gw = input<"gw", B, H, N, Mk>;
    const auto check = [](auto score, auto mask, std::size_t n, std::size_t m) {
        INFO("n " << n << ", m " << m);
        using Score = decltype(score);
        const auto over_heads = nn::attention_over_heads<H>(Q{}, K{}, V{}, score, mask);
        const auto split = nn::merge_heads(attention(nn::split_heads<H>(Q{}), nn::split_heads<H>(K{}), nn::split_heads<H>(V{}), score, mask));
        // the weights' gradient too: the loss reads them beside the output
        const auto w_over = nn::attention_weights_over_heads<H>(Q{}, K{}, score, mask);
        const auto w_split = attention_weights(nn::split_heads<H>(Q{}), nn::split_heads<H>(K{}), score, mask);
        auto a = compile<double, options{.input_grads = true}>(sum(mul(over_heads, G{})) + sum(mul(w_over, Gw{})));
        decltype(compile<double, options{.input_grads = true}>(sum(mul(split, G{})) + sum(mul(w_split, Gw{})))) b(a.shared_params());
        if constexpr (std::is_same_v<Score, scaled_dot_score> || std::is_same_v<Score, dot_score>)
            static_assert(decltype(a)::G::template index_of<decltype(nn::split_heads<H>(Q{}))> < 0, "no split: the fused ops read q in place");
        a.params().init(3);
        const auto q = random_values(2 * n * H * dk, 41), k = random_values(2 * m * H * dk, 42), v = random_values(2 * m * H * dval, 43),
                   g = random_values(2 * n * H * dval, 44), gw = random_values(2 * H * n * m, 45);
        const std::vector<index_t> len{index_t(m), index_t(m / 3)};
        const auto run = [&](auto& p) {
            p.feed("q", q.data(), rshape{3, {2, n, H * dk}});
            p.feed("k", k.data(), rshape{3, {2, m, H * dk}});
            p.feed("v", v.data(), rshape{3, {2, m, H * dval}});
            p.feed("g", g.data(), rshape{3, {2, n, H * dval}});
            p.feed("gw", gw.data(), rshape{4, {2, H, n, m}});
            if constexpr (std::remove_reference_t<decltype(p)>::template has_input<"len">) p.feed("len", len.data(), rshape{1, {2}});
            p.poison_arena(true);  // an element read before it is written shows as NaN
            const double loss = p.forward();
            p.backward();
            return loss;
        };
        const double la = run(a), lb = run(b);
        REQUIRE(std::isfinite(la));
        CHECK(la == Approx(lb).epsilon(1e-13));
        const auto worst = [](const auto& x, const auto& y) {
            double w = 0;
            for (std::size_t i = 0; i < x.size(); ++i) w = std::max(w, std::abs(x.data()[i] - y.data()[i]));
            return w;
        };
        CHECK(worst(a.template input_grad<"q">(), b.template input_grad<"q">()) <= 1e-13);
        CHECK(worst(a.template input_grad<"k">(), b.template input_grad<"k">()) <= 1e-13);
        CHECK(worst(a.template input_grad<"v">(), b.template input_grad<"v">()) <= 1e-13);
        CHECK(worst(a.value_of(w_over), b.value_of(w_split)) <= 1e-15);
    };
    for (auto [n, m] : {std::pair<std::size_t, std::size_t>{150, 150}, {70, 140}, {140, 70}}) {
        check(scaled_dot_score{}, causal{} && key_padding(Len{}), n, m);
        check(scaled_dot_score{}, no_mask{}, n, m);
        check(dot_score{}, causal{}, n, m);
        check(bilinear_score<"bil", dk, dk>{}, key_padding(Len{}), n, m);
    }
    // A mask alone means the scaled dot product, as for ctg::attention.
    static_assert(std::is_same_v<decltype(nn::attention_over_heads<H>(Q{}, K{}, V{}, causal{})),
                                 decltype(nn::attention_over_heads<H>(Q{}, K{}, V{}, scaled_dot_score{}, causal{}))>);
    static_assert(std::is_same_v<decltype(nn::attention_weights_over_heads<H>(Q{}, K{}, causal{})),
                                 decltype(nn::attention_weights_over_heads<H>(Q{}, K{}, scaled_dot_score{}, causal{}))>);
    // Finite differences, through the weights and the value product, with padding and causality.
    ctg::testing::check_config cfg;
    cfg.dims = {{'B', 2}, {'N', 5}, {'M', 4}};
    cfg.index_bound = {{"len", 5}};
    cfg.index_low = {{"len", 1}};
    CHECK(check_gradients(nn::attention_over_heads<H>(Q{}, K{}, V{}, scaled_dot_score{}, causal{} && key_padding(Len{})), cfg) > 0);
    CHECK(check_gradients(nn::attention_over_heads<H>(Q{}, K{}, V{}), cfg) > 0);
}

TEST_CASE("fused additive scores equal the composed n x m x a tanh graph, values and gradients", "[attention]") {
    // The composed form materialises tanh(qp_i + kp_j) for every pair: qp (B, n, a) is repeated over
    // the m keys and kp (B, m, a) over the n queries (with matmuls by rows of ones), then contracted with w.
    constexpr int a = 4;
    using score = additive_score<"add_", d, d, a>;
    using Ones = input<"ones", 1, n>;    // repeats a key row for each of the n queries
    using OnesM = input<"ones_m", 1, m>; // repeats a query row for each of the m keys
    auto qp = score::queries_of(Q{});    // (B, n, a)
    auto kp = score::keys_of(K{});       // (B, m, a)
    // qp expanded to (B, n, m, a): (B, n, a, 1) x (1, m) -> (B, n, a, m) -> permute to (B, n, m, a)
    auto qx = permute<0, 1, 3, 2>(matmul(reshape<B, n, a, 1>(qp), OnesM{}));
    // kp expanded to (B, n, m, a): (B, m, a, 1) x (1, n) -> (B, m, a, n) -> permute to (B, n, m, a)
    auto kx = permute<0, 3, 1, 2>(matmul(reshape<B, m, a, 1>(kp), Ones{}));
    auto s_composed = matmul(tanh(qx + kx), score::w{});  // (B, n, m)
    check_same_function(attention(Q{}, K{}, V{}, score{}), matmul(masked_softmax(s_composed, no_mask{}), V{}), 1e-12, 7);
    check_same_function(attention(Q{}, K{}, V{}, score{}, causal{} && key_padding(Len{})),
                        matmul(masked_softmax(s_composed, causal{} && key_padding(Len{})), V{}), 1e-12, 8);
    // And the fused op alone by finite differences.
    CHECK(check_gradients(additive_scores(input<"qp", B, n, a>{}, input<"kp", B, m, a>{}, param<"w", a>{}),
                          {.dims = {{'B', 2}}}) > 0);
}

TEST_CASE("attention weights are readable after forward", "[attention]") {
    auto mask = causal{};
    auto o = attention(Q{}, K{}, V{}, mask);
    auto prog = compile<double>(sum(o));
    const auto q = random_values(2 * n * d, 31), k = random_values(2 * m * d, 32), v = random_values(2 * m * dv, 33);
    prog.feed("q", q.data(), rshape{3, {2, n, d}});
    prog.feed("k", k.data(), rshape{3, {2, m, d}});
    prog.feed("v", v.data(), rshape{3, {2, m, dv}});
    prog.forward();
    auto w = prog.value_of(attention_weights(Q{}, K{}, mask));  // the same expression: the same node
    // Recompute the weights on the host: softmax(q k^T / sqrt(d)) under the causal mask.
    std::vector<double> s(2 * n * m);
    for (std::size_t b = 0; b < 2; ++b)
        for (std::size_t i = 0; i < n; ++i)
            for (std::size_t j = 0; j < m; ++j) {
                double dot = 0;
                for (std::size_t c = 0; c < d; ++c) dot += q[(b * n + i) * d + c] * k[(b * m + j) * d + c];
                s[(b * n + i) * m + j] = dot / std::sqrt(double(d));
            }
    const auto want = reference_weights(s, 2, n, m, [](auto, auto i, auto j) { return (long long)j <= position(i, n, m); });
    for (std::size_t e = 0; e < want.size(); ++e) CHECK(w.data()[e] == Approx(want[e]).margin(1e-14));
}

TEST_CASE("masks: bad lengths and bad matrices are errors naming the input and the value", "[attention][errors]") {
    auto prog = compile<float>(sum(attention(Q{}, K{}, V{}, bilinear_score<"W", d, d>{}, key_padding(Len{}))));
    prog.params().init(5);
    xt::xtensor<float, 3> q = xt::ones<float>({2, n, d}), k = xt::ones<float>({2, m, d}), v = xt::ones<float>({2, m, dv});
    prog.feed<"q">(q);
    prog.feed<"k">(k);
    prog.feed<"v">(v);
    prog.feed<"len">(xt::xtensor<int, 1>{3, 0});
    const std::vector<float> before(prog.params().values().begin(), prog.params().values().end());
    CHECK_THROWS_WITH(prog.forward(), Catch::Contains("length 0 of sequence 1 in input 'len' is outside [1, 5]"));
    REQUIRE(prog.params().num_elements() == std::size_t(d * d));
    CHECK(std::equal(before.begin(), before.end(), prog.params().values().begin()));  // nothing changed
    prog.feed<"len">(xt::xtensor<int, 1>{6, 2});
    CHECK_THROWS_AS(prog.forward(), index_error);
    CHECK_THROWS_WITH(prog.forward(), Catch::Contains("length 6 of sequence 0 in input 'len'"));
    prog.feed<"len">(xt::xtensor<int, 1>{5, 1});
    CHECK(std::isfinite(prog.forward()));
    // A lengths tensor for another batch size: the program's own dimension check names both inputs.
    prog.feed<"len">(xt::xtensor<int, 1>{5, 1, 2});
    CHECK_THROWS_WITH(prog.forward(), Catch::Contains("dimension 'B' disagrees"));

    // A mask matrix whose runtime size disagrees with the scores' (both dynamic).
    constexpr dim N = dyn('N');
    auto p2 = compile<float>(sum(masked_softmax(input<"s", N, N>{}, mask_matrix(index_input<"mask", N, N>{}))));
    p2.feed<"s">(xt::xtensor<float, 2>(xt::zeros<float>({3, 3})));
    p2.feed<"mask">(xt::xtensor<int, 2>(xt::ones<int>({4, 4})));
    CHECK_THROWS_WITH(p2.forward(), Catch::Contains("dimension 'N' disagrees") && Catch::Contains("'mask'"));
}

TEST_CASE("gradcheck: layout ops and l2_normalize", "[gradcheck]") {
    using X3 = input<"x", B, 3, 4>;
    CHECK(check_gradients(reshape<B, 4, 3>(X3{})) > 0);
    CHECK(check_gradients(reshape<B, 1, 12>(X3{})) > 0);
    CHECK(check_gradients(permute<0, 2, 1>(X3{})) > 0);
    CHECK(check_gradients(permute<1, 0, 2>(X3{})) > 0);
    CHECK(check_gradients(permute<2, 1, 0>(X3{})) > 0);
    using X4 = input<"x", B, 2, 3, 4>;
    CHECK(check_gradients(permute<0, 2, 1, 3>(X4{})) > 0);
    CHECK(check_gradients(permute<3, 1, 0, 2>(X4{})) > 0);
    CHECK(check_gradients(l2_normalize(X3{})) > 0);
    // split then merge heads is the identity, and its gradient too
    CHECK(check_gradients(nn::merge_heads(nn::split_heads<2>(input<"x", B, 3, 4>{}))) > 0);
}

TEST_CASE("permute and reshape move elements where the shapes say", "[attention]") {
    using X4 = input<"x", B, 2, 3, 4>;
    auto prog = compile<double, options{.inference = true}>(permute<0, 2, 1, 3>(X4{}));
    // A batch of 2, and one of 2048 (6 x 2048 rows of 4: over the split threshold), whose ranges of
    // rows run as pool tasks at 2 threads: each task starts its walk at its own first row.
    for (std::size_t batch : {std::size_t(2), std::size_t(2048)})
        for (int threads : {1, 2}) {
            ctg::testing::pool_threads pool(threads);
            xt::xtensor<double, 4> x = xt::xtensor<double, 4>::from_shape({batch, 2, 3, 4});
            for (std::size_t i = 0; i < x.size(); ++i) x.data()[i] = double(i);
            prog.feed<"x">(x);
            prog.forward();
            auto y = prog.output();
            std::size_t misplaced = 0;
            for (std::size_t b = 0; b < batch; ++b)
                for (std::size_t h = 0; h < 2; ++h)
                    for (std::size_t t = 0; t < 3; ++t)
                        for (std::size_t c = 0; c < 4; ++c) misplaced += y(b, t, h, c) != x(b, h, t, c);
            INFO("batch " << batch << " threads " << threads);
            CHECK(misplaced == 0);
        }
    // l2_normalize: unit rows, and a zero row stays zero.
    auto p2 = compile<double, options{.inference = true}>(l2_normalize(input<"z", 2, 3>{}));
    p2.feed<"z">(xt::xtensor<double, 2>{{3, 4, 0}, {0, 0, 0}});
    p2.forward();
    auto z = p2.output();
    CHECK(z(0, 0) == Approx(0.6));
    CHECK(z(0, 1) == Approx(0.8));
    CHECK(z(1, 0) == 0.0);
}
