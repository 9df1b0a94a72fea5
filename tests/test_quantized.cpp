// Quantised decoding (options::weights): a generator with int8 or 4-bit weights computes what a
// float generator computes over the dequantised weights, on every path of this CPU; the program
// quantises exactly the weights its products read (an untied and a tied head); copies follow
// writes; files keep the codes bit for bit; bad input is refused with the parameter named.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/xtensor.hpp>
#include <ctgraph/quantize.hpp>

using namespace ctg;

namespace {
using gpt = nn::gpt<13, 40, 32, 2, 2>;  // untied head (D, V): read as x W
using gpt2 = nn::gpt2<13, 40, 32, 2, 2>;  // tied head: tok_embed (V, D) read as x E^T

template <class Model>
std::shared_ptr<parameter_store<float>> trained_looking_store() {
    auto store = std::make_shared<parameter_store<float>>();
    nn::gpt_generator<Model> probe(store, 1, 1);  // registers the parameters
    store->init(5);
    for (std::size_t s = 0; s < store->size(); ++s)  // gains and biases away from 1 and 0
        for (std::size_t k = 0; k < store->at(s).shape.size(); ++k) store->value(s)[k] += 0.1f * std::sin(float(3 * k + s));
    return store;
}

/// A copy of `store` whose weights are the dequantised values of its quantised copies in `f`.
std::shared_ptr<parameter_store<float>> dequantised(const parameter_store<float>& store, weight_format f) {
    auto d = std::make_shared<parameter_store<float>>(store);
    for (std::size_t s = 0; s < store.size(); ++s)
        if (const auto* q = quantized(store, s, f)) set_quantized(*d, s, *q);
    return d;
}

/// Sets CTG_QUANT_ISA for one scope.
struct quant_isa {
    explicit quant_isa(const char* path) { setenv("CTG_QUANT_ISA", path, 1); }
    ~quant_isa() { unsetenv("CTG_QUANT_ISA"); }
};

std::vector<kernels::quant_path> paths_here() {
    std::vector<kernels::quant_path> p;
    for (auto q : kernels::all_quant_paths)
        if (kernels::quant_path_supported(q)) p.push_back(q);
    return p;
}

// Logits of two new tokens after two prompts of different lengths: the first from the prefill
// (14 rows: dequantised blocks and the float engine), the second from a cached step (2 rows: the
// quantised kernels), by a generator with Weights and a float one over the dequantised store.
template <class Model, weight_format Weights>
void check_against_dequantised() {
    auto store = trained_looking_store<Model>();
    nn::gpt_generator<Model, float, precision::f32, precision::f32, Weights> quantised(store, 2, 16);
    auto reference_store = dequantised(*store, Weights);
    nn::gpt_generator<Model> reference(reference_store, 2, 16), original(store, 2, 16);
    const std::vector<std::vector<int>> prompts = {{1, 2, 3, 4, 5, 6, 7}, {12, 0, 3}};
    std::vector<std::vector<float>> want, unquantised;
    const auto want_tokens = reference.generate(prompts, 3, &want);
    original.generate(prompts, 3, &unquantised);  // the float model over the weights as they were
    for (auto path : paths_here()) {
        const quant_isa restrict(std::string(kernels::quant_path_name(path)).c_str());
        std::vector<std::vector<float>> got;
        const auto tokens = quantised.generate(prompts, 3, &got);
        // The prefill is float arithmetic on the dequantised weights: float rounding alone. A step's
        // products: float activations on the scalar and AVX-512 paths (float rounding again); int8
        // activations on the VNNI paths, each row rounded to 8 bits (per row for int8 weights, per
        // 32 for 4-bit): relative error up to 2^-8 per activation, which a logit of this model
        // carries as about 1 % of the logits' scale.
        const float step_tolerance = kernels::quant_int8_activations(path) ? 3e-2f : 1e-4f;
        for (std::size_t b = 0; b < prompts.size(); ++b) {
            REQUIRE(got[b].size() == 3 * 13);
            float scale = 1, prefill = 0, step = 0, moved = 0;
            for (std::size_t v = 0; v < 13; ++v) {
                scale = std::max(scale, std::abs(want[b][v]));
                prefill = std::max(prefill, std::abs(got[b][v] - want[b][v]));
                moved = std::max(moved, std::abs(got[b][v] - unquantised[b][v]));
                if (tokens[b][0] == want_tokens[b][0]) step = std::max(step, std::abs(got[b][13 + v] - want[b][13 + v]));
            }
            INFO("weights " << (Weights == weight_format::int8 ? "int8" : "q4") << ", path " << kernels::quant_path_name(path)
                            << ", sequence " << b << ": logits' scale " << scale);
            CHECK(tokens[b][0] == want_tokens[b][0]);
            CHECK(prefill <= 1e-4f * scale);
            CHECK(step <= step_tolerance * scale);
            // The quantised weights were read: the logits moved from the unquantised model's by far
            // more than the tolerance above (were the float weights read, `prefill` would fail).
            CHECK(moved > 1e-3f * scale);
        }
    }
}

std::set<std::string> quantised_names(const parameter_store<float>& store, weight_format f, bool transposed) {
    std::set<std::string> r;
    for (std::size_t s = 0; s < store.size(); ++s)
        if (const auto* q = quantized(store, s, f); q && q->transposed == transposed) r.insert(store.at(s).name);
    return r;
}
}  // namespace

// nn::gpt2's tied head reads the embedding table as x E^T from its quantised copy, and its lookups
// read the same copy: the model is the float model over the dequantised weights in both cases.
TEST_CASE("int8 weights: a generator computes what a float one does over the dequantised weights, untied and tied head", "[quantized]") {
    check_against_dequantised<gpt, weight_format::int8>();
    check_against_dequantised<gpt2, weight_format::int8>();
}

TEST_CASE("4-bit weights: a generator computes what a float one does over the dequantised weights, untied and tied head", "[quantized]") {
    check_against_dequantised<gpt, weight_format::q4>();
    check_against_dequantised<gpt2, weight_format::q4>();
}

// The tied head's product alone, x E^T against the float product by the dequantised table, on
// every path, by 2 rows (the quantised kernels) and by 20 (dequantised blocks).
TEST_CASE("a tied head's product x E^T reads the table's quantised copy, transposed", "[quantized]") {
    using X = input<"x", dyn('B'), 64>;
    using E = param<"tok_embed", 300, 64>;
    const auto head = matmul_transposed(X{}, E{});
    for (weight_format f : {weight_format::int8, weight_format::q4}) {
        auto store = std::make_shared<parameter_store<float>>();
        store->add("tok_embed", rshape{2, {300, 64}});
        store->init(3);
        auto ref_store = std::make_shared<parameter_store<float>>(*store);
        std::vector<float> got, want;
        auto run = [&](auto& prog, std::size_t rows, std::vector<float>& out) {
            std::vector<float> x(rows * 64);
            for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * float(i)) + 0.2f;
            prog.feed("x", x.data(), rshape{2, {rows, 64}});
            prog.forward();
            const float* y = prog.template output<0>().data();
            out.assign(y, y + rows * 300);
        };
        auto check = [&](auto& quantised) {
            for (std::size_t s = 0; s < store->size(); ++s)
                if (const auto* q = quantized(*store, s, f)) set_quantized(*ref_store, s, *q);
            REQUIRE(quantized(*store, 0, f) != nullptr);
            CHECK(quantized(*store, 0, f)->transposed);
            program_for<float, options{.inference = true}, decltype(head)> reference(ref_store);
            for (std::size_t rows : {2u, 20u})
                for (auto path : paths_here()) {
                    const quant_isa restrict(std::string(kernels::quant_path_name(path)).c_str());
                    run(quantised, rows, got);
                    run(reference, rows, want);
                    float worst = 0, scale = 0;
                    for (std::size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i])), scale = std::max(scale, std::abs(want[i]));
                    INFO((f == weight_format::int8 ? "int8" : "q4") << ", " << rows << " rows, path " << kernels::quant_path_name(path));
                    // (int8 activations on the VNNI paths by 2 rows: see check_against_dequantised)
                    CHECK(worst <= (rows <= 8 && kernels::quant_int8_activations(path) ? 2e-2f : 1e-5f) * scale);
                }
        };
        if (f == weight_format::int8) {
            auto q = program_for<float, options{.inference = true, .weights = weight_format::int8}, decltype(head)>(store);
            check(q);
        } else {
            auto q = program_for<float, options{.inference = true, .weights = weight_format::q4}, decltype(head)>(store);
            check(q);
        }
    }
}

TEST_CASE("a quantised program quantises exactly the weights its products read", "[quantized]") {
    auto store = trained_looking_store<gpt>();
    nn::gpt_generator<gpt, float, precision::f32, precision::f32, weight_format::int8> gen(store, 1, 8);
    const std::set<std::string> projections = {"blocks.q.weight", "blocks.k.weight", "blocks.v.weight", "blocks.proj.weight",
                                               "blocks.fc1.weight", "blocks.fc2.weight"};
    std::set<std::string> want = projections;
    want.insert("head.weight");
    CHECK(quantised_names(*store, weight_format::int8, false) == want);  // not the embedding table, norms or biases
    CHECK(quantised_names(*store, weight_format::int8, true).empty());
    CHECK(quantised_names(*store, weight_format::q4, false).empty());
    // A stacked weight has one matrix per layer, each with its own scales.
    const auto* q = quantized(*store, store->slot("blocks.fc1.weight"), weight_format::int8);
    REQUIRE(q != nullptr);
    CHECK(q->matrices.size() == 2);
    CHECK(q->matrices[0].K == 32);
    CHECK(q->matrices[0].N == 128);
    CHECK(quantized_bytes(*store, weight_format::int8) > 0);
    // Programs of both formats share a store: each slot keeps a copy per format.
    nn::gpt_generator<gpt, float, precision::f32, precision::f32, weight_format::q4> gen4(store, 1, 8);
    CHECK(quantised_names(*store, weight_format::q4, false) == want);
    CHECK(quantised_names(*store, weight_format::int8, false) == want);

    auto store2 = trained_looking_store<gpt2>();
    nn::gpt_generator<gpt2, float, precision::f32, precision::f32, weight_format::q4> gen2(store2, 1, 8);
    CHECK(quantised_names(*store2, weight_format::q4, true) == std::set<std::string>{"tok_embed"});  // the tied head, read as x E^T
    CHECK(quantised_names(*store2, weight_format::q4, false) == projections);
    const auto* e = quantized(*store2, store2->slot("tok_embed"), weight_format::q4);
    REQUIRE(e != nullptr);
    CHECK(e->matrices[0].K == 32);  // the product's input: the width
    CHECK(e->matrices[0].N == 13);  // its outputs: one per token
}

TEST_CASE("quantised copies follow writes to the weights", "[quantized]") {
    auto store = trained_looking_store<gpt>();
    nn::gpt_generator<gpt, float, precision::f32, precision::f32, weight_format::int8> gen(store, 1, 8);
    const std::size_t head = store->slot("head.weight");
    const auto copy = [&] { return quantized(*store, head, weight_format::int8); };
    const float before = copy()->matrices[0].q8.scale[0];
    const auto first = gen.generate({{1, 2}}, 2);
    for (std::size_t k = 0; k < store->at(head).shape.size(); ++k) store->value(head)[k] *= 2.0f;
    CHECK(copy()->stale);
    std::vector<std::vector<float>> logits;
    gen.generate({{1, 2}}, 2, &logits);  // refreshes the copy first
    CHECK_FALSE(copy()->stale);
    CHECK(copy()->matrices[0].q8.scale[0] == Approx(2.0f * before).epsilon(1e-6));
    (void)first;
}

TEST_CASE("quantised weights refuse what they cannot hold, naming the parameter", "[quantized]") {
    using narrow = nn::gpt<13, 40, 24, 2, 1>;  // width 24: not a multiple of 32
    auto store = std::make_shared<parameter_store<float>>();
    nn::gpt_generator<narrow> probe(store, 1, 1);
    store->init(1);
    try {
        nn::gpt_generator<narrow, float, precision::f32, precision::f32, weight_format::q4> gen(store, 1, 8);
        FAIL("a 4-bit copy of a weight with 24 inputs was made");
    } catch (const shape_error& e) {
        CHECK_THAT(e.what(), Catch::Contains("not a multiple of 32") && Catch::Contains("blocks."));
    }
    // int8 has no such rule.
    nn::gpt_generator<narrow, float, precision::f32, precision::f32, weight_format::int8> gen8(store, 1, 8);
    CHECK(gen8.generate({{1}}, 2)[0].size() == 2);

    store->value(store->slot("head.weight"))[3] = std::numeric_limits<float>::quiet_NaN();
    CHECK_THROWS_WITH(gen8.generate({{1}}, 2), Catch::Contains("not finite") && Catch::Contains("head.weight"));

    parameter_store<float> floats;
    floats.add("b", rshape{1, {4}});
    CHECK_THROWS_WITH(quantize(floats, 0, weight_format::int8), Catch::Contains("not a matrix") && Catch::Contains("'b'"));
    CHECK_THROWS_WITH(quantize(floats, 0, weight_format::f32), Catch::Contains("no quantised format"));
}

TEST_CASE("quantised models in files: codes and scales bit for bit, all or nothing", "[quantized]") {
    const auto dir = std::filesystem::temp_directory_path() / "ctg_test_quantized";
    std::filesystem::create_directories(dir);
    for (weight_format f : {weight_format::int8, weight_format::q4}) {
        auto store = trained_looking_store<gpt2>();
        std::vector<std::vector<float>> want, got;
        std::vector<std::vector<int>> want_tokens, got_tokens;
        const std::string path = (dir / (f == weight_format::int8 ? "m.int8.safetensors" : "m.q4.safetensors")).string();
        auto run = [&](auto& gen, auto& logits, auto& tokens) { tokens = gen.generate({{1, 2, 3}}, 4, &logits); };
        if (f == weight_format::int8) {
            nn::gpt_generator<gpt2, float, precision::f32, precision::f32, weight_format::int8> gen(store, 1, 8);
            run(gen, want, want_tokens);
        } else {
            nn::gpt_generator<gpt2, float, precision::f32, precision::f32, weight_format::q4> gen(store, 1, 8);
            run(gen, want, want_tokens);
        }
        CHECK_THROWS_WITH(save_quantized(*store, f == weight_format::int8 ? weight_format::q4 : weight_format::int8, path),
                          Catch::Contains("no"));  // no copies in the other format
        save_quantized(*store, f, path);
        const auto meta_file = safetensors::read(path);
        CHECK(meta_file.count(f == weight_format::int8 ? "tok_embed.int8" : "tok_embed.q4_0") == 1);
        CHECK(meta_file.count("tok_embed") == 0);
        CHECK(meta_file.count("ln_f.weight") == 1);

        auto loaded = std::make_shared<parameter_store<float>>();
        nn::gpt_generator<gpt2> probe(loaded, 1, 1);  // the parameters, zero
        load_quantized(*loaded, path);
        for (std::size_t s = 0; s < store->size(); ++s) {
            const auto* a = quantized(*store, s, f);
            const auto* b = quantized(*loaded, loaded->slot(store->at(s).name), f);
            INFO(store->at(s).name);
            REQUIRE((a == nullptr) == (b == nullptr));
            if (!a) {
                CHECK(std::equal(store->value(s), store->value(s) + store->at(s).shape.size(), loaded->value(loaded->slot(store->at(s).name))));
                continue;
            }
            REQUIRE(a->matrices.size() == b->matrices.size());
            CHECK(a->transposed == b->transposed);
            for (std::size_t m = 0; m < a->matrices.size(); ++m) {
                CHECK(a->matrices[m].q8.q == b->matrices[m].q8.q);
                CHECK(a->matrices[m].q8.scale == b->matrices[m].q8.scale);
                CHECK(a->matrices[m].q8.column_sum == b->matrices[m].q8.column_sum);
                CHECK(a->matrices[m].q4.nibbles == b->matrices[m].q4.nibbles);
                CHECK(a->matrices[m].q4.scale == b->matrices[m].q4.scale);
            }
        }
        // The loaded model decodes as the one saved (its copies are the file's, not quantised again).
        if (f == weight_format::int8) {
            nn::gpt_generator<gpt2, float, precision::f32, precision::f32, weight_format::int8> gen(loaded, 1, 8);
            run(gen, got, got_tokens);
        } else {
            nn::gpt_generator<gpt2, float, precision::f32, precision::f32, weight_format::q4> gen(loaded, 1, 8);
            run(gen, got, got_tokens);
        }
        CHECK(got_tokens == want_tokens);
        CHECK(got == want);
    }
    // A file without one of the tensors: refused, naming it; the store is unchanged.
    {
        auto store = trained_looking_store<gpt2>();
        nn::gpt_generator<gpt2, float, precision::f32, precision::f32, weight_format::int8> gen(store, 1, 8);
        const std::string path = (dir / "m.int8.safetensors").string();
        auto tensors = safetensors::read(path);
        safetensors::metadata meta;
        safetensors::read(path, &meta);
        tensors.erase("blocks.q.weight.int8_scale");
        std::vector<safetensors::tensor> kept;
        for (auto& [name, t] : tensors) kept.push_back(t);
        const std::string broken = (dir / "broken.safetensors").string();
        safetensors::write(broken, kept, meta);
        const std::vector<float> before(store->values().begin(), store->values().end());
        CHECK_THROWS_WITH(load_quantized(*store, broken), Catch::Contains("blocks.q.weight.int8_scale") && Catch::Contains("missing"));
        CHECK(std::equal(before.begin(), before.end(), store->values().begin()));
    }
    std::filesystem::remove_all(dir);
}
