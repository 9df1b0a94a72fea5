// ctgraph/graph/program.hpp: compile(outputs...) -> a program: forward, backward, parameters.
//
//   auto prog = ctg::compile<float>(loss);           // or compile<double, options{.input_grads = true}>,
//                                                     // or options{.inference = true}: forward only
//   prog.params().init(seed);                         // parameters live in a (shareable) store
//   prog.feed<"x">(batch_x); prog.feed<"y">(batch_y); // copies into the program's input buffers
//   float l = prog.forward();                         // runs every node once, in topological order
//   prog.backward();                                  // vector-Jacobian products in reverse order;
//                                                     // parameter gradients ADD (zero_grad() clears)
//
// Memory: every activation, adjoint and op scratch lives in one aligned arena, planned from the graph
// when the dynamic sizes change (and only grown, never shrunk); a step with unchanged sizes allocates
// nothing. Dynamic dimensions are bound from the fed inputs and checked once at the entry of forward().
#pragma once
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ctgraph/error.hpp"
#include "ctgraph/graph/analysis.hpp"
#include "ctgraph/graph/elements.hpp"
#include "ctgraph/graph/exec.hpp"
#include "ctgraph/graph/program_tables.hpp"
#include "ctgraph/graph/summary.hpp"
#include "ctgraph/kernels/simd.hpp"
#include "ctgraph/memory.hpp"
#include "ctgraph/op.hpp"
#include "ctgraph/graph/weights.hpp"
#include "ctgraph/params.hpp"

namespace ctg {

/// A compiled graph: owns the input buffers and one arena of values and adjoints, and
/// shares a parameter_store. Made by ctg::compile (or declared as ctg::program_for). Its forward and
/// backward passes are generated from the outputs' types; feeding, running and reading results are
/// its members. Moves, does not copy.
/// @tparam T   float or double
/// @tparam Opt compile options (ctg::options)
/// @tparam Outs the output nodes
template <class T, options Opt, class... Outs>
class program {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                  "ctg::compile: the scalar type must be float or double");
    static_assert(Opt.precision == precision::f32 || std::is_same_v<T, float>,
                  "ctg::compile: options{.precision = precision::bf16} needs a float program (bf16 products accumulate in float)");
    // Weight-only quantisation (options::weights), where the program may have it: nothing of it
    // is instantiated otherwise, so a program that asks for it wrongly gets the one error below.
    static constexpr bool quantised_weights =
        Opt.weights != weight_format::f32 && std::is_same_v<T, float> && Opt.inference && Opt.precision == precision::f32;
    static_assert(Opt.weights == weight_format::f32 || quantised_weights,
                  "ctg::compile: options{.weights = int8 or q4} is weight-only quantisation for inference: it needs a float "
                  "program with options{.inference = true} and float products (precision::f32)");
    static_assert(!quantised_weights || detail::quantized_copies_declared<T>::value,
                  "ctg::compile: options{.weights = int8 or q4} needs #include <ctgraph/quantize.hpp> (the quantised copies)");

public:
    using scalar = T;  ///< the scalar type (float or double)
    using graph_type = graph<detail::topo_order<Outs...>, Opt, sizeof...(Outs)>;  ///< the graph's tables (nodes in topological order)
    using G = graph_type;  ///< short for graph_type
    static constexpr std::size_t N = G::size;  ///< the number of nodes
    /// The type of node I (topological order).
    template <std::size_t I>
    using node_t = typename G::template node_t<I>;
    static constexpr std::size_t num_outputs = sizeof...(Outs);  ///< the number of outputs
    /// The node index of each output.
    static constexpr std::array<std::size_t, num_outputs> output_nodes{
        std::size_t(G::template index_of<Outs>)...};

private:
    static_assert(G::input_grads_for_known(),
                  "ctg::compile: options::input_grads_for names something that is not a floating-point input of this program");
    // Inference programs place values and scratch by lifetime (options::keep_values).
    static constexpr bool values_by_lifetime = Opt.inference && !Opt.keep_values;
    // repeat reruns its layers' forward in backward (options::recompute; training programs only).
    static constexpr bool recompute = Opt.recompute && !Opt.inference;
    // bf16 shadows (options::bf16_shadows) of the values products read: a mixed-precision training
    // program's, in its arena and (run_info::bf16_shadows) in its repeats' layer frames.
    static constexpr bool bf16_shadows = Opt.precision == precision::bf16 && Opt.bf16_shadows && !Opt.inference;
    // The values that products read (those keep a shadow in any case).
    static constexpr std::array<bool, N> product_shadowed = [] {
        if constexpr (!bf16_shadows) {
            return std::array<bool, N>{};
        } else {
            constexpr auto prod = []<std::size_t... I>(std::index_sequence<I...>) {
                return std::array<std::uint32_t, N>{detail::bf16_operands_of<detail::op_of_t<typename G::template node_t<I>>>...};
            }(std::make_index_sequence<N>{});
            return detail::bf16_shadowed(G::arity, G::operands, prod,
                                         [](std::size_t i) { return G::kind[i] == leaf_kind::none && !G::is_index[i]; },
                                         [](std::size_t) { return true; });
        }
    }();
    // Values that keep no float for backward (options::bf16_only; detail::bf16_only_values): outputs keep theirs.
    static constexpr bool bf16_only_on = bf16_shadows && Opt.bf16_only;
    // ... and values that VJPs read rounded (options::bf16_saved).
    static constexpr bool bf16_saved_on = bf16_only_on && Opt.bf16_saved;
    static constexpr detail::bf16_only_plan<N> only_plan = [] {
        if constexpr (!bf16_only_on) {
            detail::bf16_only_plan<N> r{};
            r.shadow = product_shadowed;
            return r;
        } else {
            return detail::bf16_only_values_of<G, bf16_saved_on>(product_shadowed, [](std::size_t i) {
                return G::kind[i] == leaf_kind::none && !G::is_index[i] &&
                       std::find(output_nodes.begin(), output_nodes.end(), i) == output_nodes.end();
            });
        }
    }();
    // The values that keep a bf16 shadow: those products read, and those VJPs read rounded.
    static constexpr std::array<bool, N> shadowed = only_plan.shadow;
    static constexpr bool any_shadowed = std::find(shadowed.begin(), shadowed.end(), true) != shadowed.end();
    static constexpr bool any_bf16_only = std::find(only_plan.only.begin(), only_plan.only.end(), true) != only_plan.only.end();
    // What a repeat's frames keep (scratch_size's fifth argument; op.hpp, bf16_frame_level).
    static constexpr int bf16_level = bf16_frame_level(bf16_shadows, bf16_only_on, bf16_saved_on);
    // Whether node i's float is scratch shared while forward reads it (one of those, not an alias).
    static constexpr bool float_transient(std::size_t i) { return only_plan.only[i] && !G::aliases[i] && !only_plan.no_float[i]; }
    // The last forward step that reads node i's memory: its last reader's, extended through the
    // nodes that alias it (reshape) and past the end (N) for outputs; an aliasing node gets the
    // lifetime of the memory it reads.
    static constexpr std::array<std::size_t, N> value_until = [] {
        std::array<std::size_t, N> u = G::last_use;
        for (std::size_t o : output_nodes) u[o] = N;
        for (std::size_t i = N; i-- > 0;)
            if (G::aliases[i]) u[std::size_t(G::operands[i][0])] = std::max(u[std::size_t(G::operands[i][0])], u[i]);
        for (std::size_t i = 0; i < N; ++i)
            if (G::aliases[i]) u[i] = u[std::size_t(G::operands[i][0])];
        return u;
    }();

    static constexpr auto clash = G::name_clash;
    template <int I>
    using pretty_of = std::conditional_t<(I >= 0), typename G::template node_t<(I >= 0 ? I : 0)>::shape::pretty,
                                         shape_is<>>;
    static_assert(with_shapes<clash.first < 0, pretty_of<clash.first>, pretty_of<clash.second>>::value,
                  "ctg::compile: two different leaves share one name (a name must mean one tensor: same kind "
                  "and same shape)");
    static_assert(G::dims_bound_by_inputs,
                  "ctg::compile: a dynamic dimension is used that no input declares (bind it through an input)");
    static_assert(G::num_inputs <= 64, "ctg::compile: at most 64 distinct inputs per program");
    static_assert(with_name<G::unmatched_freeze_entry.data[0] == 0, G::unmatched_freeze_entry>::value,
                  "ctg::compile: an entry of options::frozen or options::trainable matches no parameter of this program "
                  "(a name, a prefix cut at a '.', or a pattern with '*')");

    using input_slot = detail::input_slot<T>;
    // The graph's tables for the code that needs no types (graph/program_tables.hpp).
    static constexpr const detail::graph_tables& tables = detail::tables_of<G>;

public:
    /// A program with its own, zero-initialised parameter store.
    program() : program(std::make_shared<parameter_store<T>>()) {}

    /// Views point into the program's own arena and input buffers: a copy would share them, so a
    /// program moves (the heap buffers move with it, the views stay valid) but does not copy. For a
    /// second program over the same weights, construct one from shared_params().
    program(const program&) = delete;
    program& operator=(const program&) = delete;
    program(program&&) noexcept = default;  ///< moves (the views stay valid)
    program& operator=(program&&) noexcept = default;  ///< moves (the views stay valid)

    /// A program bound to an existing store (shared with other programs); missing parameters are
    /// added (unless the store is strict, as one loaded from a file is: then it throws listing
    /// them, parameter_store::strict), existing ones must have the same shape.
    explicit program(std::shared_ptr<parameter_store<T>> store) : store_(std::move(store)) {
        detail::add_parameters(*store_, tables, param_slot_.data());
        if constexpr (Opt.precision == precision::bf16) store_->enable_bf16();  // products read the weights' bf16 copies
        if constexpr (quantised_weights) quantize_weights();  // ... or their quantised copies
        // A training program says which of its parameters train (options::frozen): the store keeps
        // gradients and optimizers keep state for those alone.
        if constexpr (!Opt.inference)
            store_->set_frozen(G::num_params, param_slot_.data(), [](std::size_t p) { return !G::needs_grad[G::param_nodes[p]]; });
        sorted_slots_ = param_slot_;
        std::sort(sorted_slots_.begin(), sorted_slots_.begin() + G::num_params);
        for (std::size_t p = 0; p < G::num_params; ++p)
            if (param_written_fresh[p]) {
                if (fresh_slots_.size() <= param_slot_[p]) fresh_slots_.resize(param_slot_[p] + 1, false);
                fresh_slots_[param_slot_[p]] = true;
            }
    }

    // ---------------------------------------------------------------- parameters
    /// The parameter store (values, gradients, initialisation, saving).
    parameter_store<T>& params() { return *store_; }
    /// The parameter store, read-only.
    const parameter_store<T>& params() const { return *store_; }
    /// The store as a shared pointer: construct a second program over the same weights from it.
    std::shared_ptr<parameter_store<T>> shared_params() const { return store_; }
    /// Clears the gradients of the whole store (lazily: the next backward's first writer assigns).
    void zero_grad() { store_->zero_grad(); }

    /// Value of parameter `Name` as an xtensor view (writable; needs <ctgraph/xtensor.hpp>).
    template <fixed_string Name>
    auto param() { return adapt(store_->value(param_slot_[param_ordinal<Name>()]), static_shape(leaf<Name>())); }
    /// Gradient of parameter `Name` as an xtensor view.
    template <fixed_string Name>
    auto grad() { return adapt(store_->grad(param_slot_[param_ordinal<Name>()]), static_shape(leaf<Name>())); }

    // ---------------------------------------------------------------- inputs
    /// Whether the program has an input (float or index) of this name.
    template <fixed_string Name>
    static constexpr bool has_input = [] {
        for (std::size_t i : G::input_nodes)
            if (G::label[i] == Name.view()) return true;
        return false;
    }();

    /// Copies a tensor into input `Name`: an xtensor container or expression, or any type with
    /// shape() and row-major begin()/end(). Its rank and static dimensions must match the
    /// declaration; dynamic ones bind the dimension letters (checked together at forward()).
    template <fixed_string Name, class E>
        requires requires(const E& e) { e.shape(); e.begin(); }
    void feed(const E& d) {
        constexpr int i = leaf<Name>();  // a missing name is reported there; the checks below then pass
        static_assert(with_name<(leaf_index<Name> < 0 || G::kind[i] == leaf_kind::input ||
                                 G::kind[i] == leaf_kind::index_input),
                                Name>::value,
                      "ctg::program::feed: this leaf is not an input");
        const rshape s = detail::input_shape_of(tables, std::size_t(i), d.shape());
        if constexpr (G::is_bf16[i]) {  // floats, rounded to the bf16 storage
            auto& slot = set_shape(input_ordinal(i), s);
            detail::for_each_row_major(d, [&](std::size_t k, auto v) { slot.halves[k] = kernels::to_bf16(float(v)); });
        } else if constexpr (G::kind[i] == leaf_kind::index_input) {
            static_assert(leaf_index<Name> < 0 || std::is_integral_v<std::remove_cvref_t<decltype(*d.begin())>>,
                          "ctg::program::feed: an index_input takes an integer tensor");
            detail::for_each_row_major(d, [&](std::size_t k, auto v) {  // check everything before changing anything
                const long long id = static_cast<long long>(v);
                if (id < std::numeric_limits<index_t>::min() || id > std::numeric_limits<index_t>::max())
                    throw index_error("ctg::program::feed: input '" + std::string(Name.view()) + "' element " +
                                      std::to_string(k) + " = " + std::to_string(id) + " does not fit int32");
            });
            auto& slot = set_shape(input_ordinal(i), s);
            detail::for_each_row_major(d, [&](std::size_t k, auto v) { slot.indices[k] = index_t(v); });
        } else {
            auto& slot = set_shape(input_ordinal(i), s);  // (allocates nothing once the buffer is large enough)
            T* dst = slot.values.data();
            detail::for_each_row_major(d, [&](std::size_t k, auto v) { dst[k] = T(v); });
        }
    }
    /// Whether input `name` is an index input (integer ids) rather than a floating-point one; throws
    /// ctg::error when the program has no input of that name.
    bool is_index_input(std::string_view name) const {
        for (std::size_t k = 0; k < G::num_inputs; ++k)
            if (G::label[G::input_nodes[k]] == name) return G::kind[G::input_nodes[k]] == leaf_kind::index_input;
        detail::input_by_name(tables, name, false);  // throws: no input of that name
        return false;
    }
    /// Runtime-named feeding of a floating-point input from raw row-major data (a bf16_input keeps
    /// them rounded to bf16).
    void feed(std::string_view name, const T* data, const rshape& s) {
        const std::size_t k = detail::input_by_name(tables, name, false);
        auto& slot = set_shape(k, detail::check_input_shape(tables, G::input_nodes[k], s));
        if (G::is_bf16[G::input_nodes[k]])
            std::transform(data, data + s.size(), slot.halves.data(), [](T v) { return kernels::to_bf16(float(v)); });
        else
            std::copy(data, data + s.size(), slot.values.data());
    }
    /// Points floating-point input `name` at the caller's memory instead of copying it: forward reads
    /// it in place (and an op that keeps state there, such as a KV cache, writes it in place). The
    /// memory must stay valid, and hold s.size() elements, until the input is fed or bound again.
    void bind(std::string_view name, T* data, const rshape& s) { bind_memory(name, data, s, false); }
    /// The same for a bf16_input: the caller's bfloat16 memory (a KV cache in bf16).
    void bind(std::string_view name, kernels::bf16_bits* data, const rshape& s) { bind_memory(name, data, s, true); }
    /// Runtime-named feeding of an index input from raw row-major data.
    void feed(std::string_view name, const index_t* data, const rshape& s) {
        const std::size_t k = detail::input_by_name(tables, name, true);
        auto& slot = set_shape(k, detail::check_input_shape(tables, G::input_nodes[k], s));
        std::copy(data, data + s.size(), slot.indices.data());
    }

    // ---------------------------------------------------------------- running
    /// Runs the forward pass. Returns the first output when it is a scalar (the loss).
    auto forward() {
        prepare();
        if constexpr (Opt.precision == precision::bf16) store_->refresh_bf16();  // copies of weights written since
        if constexpr (quantised_weights) refresh_quantized(*store_);  // (graph/ctgraph/quant_store.hpp)
        ++passes_;  // a new random stream for dropout; backward() reuses this pass's
        run_forward(std::make_index_sequence<N>{});
        forwarded_ = true;
        if (check_finite_)
            for (std::size_t o = 0; o < num_outputs; ++o) {
                const std::size_t i = output_nodes[o];
                if (G::rank[i] == 0 && G::elem[i] == element::real && !std::isfinite(*val_[i].template as<T>()))
                    throw numeric_error("ctg::program::forward: output " + std::to_string(o) + " (" + detail::node_name(tables, i) +
                                        ") is " + std::to_string(*val_[i].template as<T>()));
            }
        if constexpr (G::rank[output_nodes[0]] == 0) return *val_[output_nodes[0]].template as<T>();
    }

    /// Runs the backward pass: scalar outputs are seeded with 1, others with seed<k>() (zero unless
    /// written). Parameter gradients are added to; input gradients (options::input_grads) are fresh.
    void backward() { backward_with(detail::no_final_hook{}); }
    /// backward() with the scalar outputs seeded with `weight` instead of 1: the gradients of weight
    /// times the loss are added (gradient accumulation: micro-batch i of n_i samples out of N, n_i / N).
    void backward(T weight) { backward_with(detail::no_final_hook{}, weight); }

    /// backward(), calling on_final(slot) once for every parameter slot of the store: a parameter of
    /// this program right after the backward node that completes its gradient (while it is still in
    /// cache), any other parameter of the (shared) store after the pass. ctg::train_step passes the
    /// optimizer's per-parameter update here.
    ///
    /// A hook taking element ranges, on_final(slot, first, count), is called once for every element
    /// of every slot instead: a stacked parameter of ctg::repeat row by row, layer l's row (elements
    /// [l n / L, (l + 1) n / L)) as soon as layer l's backward is done, from the last layer down, so
    /// updates and all-reduces start while backward works on the earlier layers; every other
    /// parameter (one also read outside that repeat, say) whole, (slot, 0, n), where on_final(slot)
    /// would be called. for_each_final() lists the calls in this order without running backward.
    template <class OnFinal>
    void backward_with(OnFinal&& on_final, T weight = T(1)) {
        static_assert(!Opt.inference, "ctg::program::backward: this program was compiled with options{.inference = true}");
        if (!forwarded_) throw error("ctg::program::backward: call forward() first");
        // Adjoints are written fresh by their first writer (adj_writes); only the outputs' (seeded
        // below) and those no VJP writes are zeroed here.
        for (std::size_t i : zeroed_up_front)
            if (const std::size_t n = adj_[i].size()) std::memset(adj_[i].ptr, 0, n * sizeof(T));
        // After zero_grad(), parameters' gradients too are written by their first writer; the store
        // zeroes the rest (this program's parameters no VJP writes, other programs').
        const bool params_fresh = store_->zero_pending();
        if (params_fresh)
            store_->settle_zero([this](std::size_t slot) { return slot < fresh_slots_.size() && fresh_slots_[slot]; });
        for (std::size_t o = 0; o < num_outputs; ++o) {
            const std::size_t i = output_nodes[o];
            if (!G::needs_grad[i]) continue;
            T* g = adj_[i].template as<T>();
            if (G::rank[i] == 0) g[0] += weight;
            else kernels::add_to(adj_[i].size(), seeds_[o].data(), g);
        }
        try {
            run_backward(on_final, params_fresh, std::make_index_sequence<N>{});
        } catch (...) {
            // A pass that throws (anomaly mode, a size check) has written some gradients and not
            // others: after zero_grad() the zero becomes pending again, so it leaves nothing behind.
            if (params_fresh) store_->zero_grad();
            throw;
        }
        if constexpr (!std::is_same_v<std::decay_t<OnFinal>, detail::no_final_hook>) finalize_rest(on_final);
    }

    /// Calls on_final(slot, first, count) in the order in which backward_with(on_final) would,
    /// without running anything (data_parallel plans its buckets from it).
    template <class OnFinal>
        requires detail::range_final_hook<OnFinal>
    void for_each_final(OnFinal&& on_final) const {
        for (std::size_t i = N; i-- > 0;) {
            if (reports_layers[i])
                for (std::size_t l = node_layers[i]; l-- > 0;) finalize_layer(i, l, on_final);
            finalize(i, on_final);
        }
        finalize_rest(on_final);
    }

    /// The seed of output k's adjoint (for non-scalar outputs); valid after the first forward().
    auto seed(std::size_t k) { return adapt(seeds_.at(k).data(), shapes_[output_nodes[k]]); }

    /// Training mode (dropout active; the default unless compiled with options{.inference = true})
    /// or evaluation mode (dropout is the identity), as PyTorch's train() / eval().
    void training(bool on) { training_ = on && !Opt.inference; }
    bool training() const { return training_; }  ///< whether dropout is active
    /// Seeds dropout's random numbers and restarts their sequence: the same seed and the same
    /// sequence of forward() calls give the same masks.
    void dropout_seed(std::uint64_t seed) {
        dropout_seed_ = seed;
        passes_ = 0;
    }

    /// Dropout's seed and the number of forward passes drawn from it: what a checkpoint saves so that
    /// a resumed run draws the masks the uninterrupted run would have drawn.
    std::pair<std::uint64_t, std::uint64_t> dropout_state() const { return {dropout_seed_, passes_}; }
    /// Restores a dropout_state(): the seed and the number of forward passes already drawn.
    void set_dropout_state(std::uint64_t seed, std::uint64_t passes) {
        dropout_seed_ = seed;
        passes_ = passes;
    }

    /// Throw numeric_error when a scalar output is not finite (default: on).
    void check_finite(bool on) { check_finite_ = on; }
    /// Fill the arena with NaN whenever it is planned, so reading an element no op wrote shows (tests).
    void poison_arena(bool on) { poison_ = on; }

    // ---------------------------------------------------------------- results
    /// Output k after forward(), as an xtensor view.
    template <std::size_t K = 0>
    auto output() { return adapt(val_[output_nodes[K]].template as<T>(), shapes_[output_nodes[K]]); }
    /// Output k's memory after forward() (row-major, output_shape<K>() elements), without xtensor.
    template <std::size_t K = 0>
    const T* output_data() const { return val_[output_nodes[K]].template as<T>(); }
    /// Output k's shape after forward().
    template <std::size_t K = 0>
    const rshape& output_shape() const { return shapes_[output_nodes[K]]; }
    /// Gradient of input `Name` (needs options::input_grads) after backward().
    template <fixed_string Name>
    auto input_grad() {
        constexpr int i = leaf<Name>();
        static_assert(with_name<leaf_index<Name> < 0 || (G::needs_grad[i] && G::kind[i] == leaf_kind::input),
                                Name>::value,
                      "ctg::program::input_grad: no gradient for this input (compile with options{.input_grads = true}, or name "
                      "it in options::input_grads_for)");
        return adapt(adj_[i].template as<T>(), shapes_[i]);
    }
    /// The value of any node of the graph after forward(), as an xtensor view: prog.value_of(h).
    template <expr E>
    auto value_of(E) {
        constexpr int i = G::template index_of<E>;
        static_assert(i >= 0, "ctg::program::value_of: this expression is not a node of the program");
        static_assert(!E::is_index && !E::is_bf16, "ctg::program::value_of: index and bf16 tensors are read where they were fed");
        if constexpr (values_by_lifetime)
            if (G::kind[i] == leaf_kind::none && value_until[i] < N)
                throw error("ctg::program::value_of: node '" + std::string(G::label[i]) + "' (node %" + std::to_string(i) +
                            ") of an inference program is not an output, and its memory is reused by later nodes; "
                            "make it an output of compile(), or compile with options{.inference = true, "
                            ".keep_values = true}");
        return adapt(val_[i].template as<T>(), shapes_[i]);
    }
    /// The adjoint dL/dE of any node after backward() (for gradient-flow inspection): prog.adjoint_of(hs).
    template <expr E>
    auto adjoint_of(E) {
        constexpr int i = G::template index_of<E>;
        static_assert(i >= 0, "ctg::program::adjoint_of: this expression is not a node of the program");
        static_assert(G::needs_grad[i], "ctg::program::adjoint_of: this node has no adjoint (no parameter below it)");
        return adapt(adj_[i].template as<T>(), shapes_[i]);
    }
    /// Raw views of node i (tests, printing).
    const view& value_view(std::size_t i) const { return val_[i]; }
    const view& adjoint_view(std::size_t i) const { return adj_[i]; }  ///< the raw adjoint view of node i
    const rshape& node_shape(std::size_t i) const { return shapes_[i]; }  ///< the runtime shape of node i
    /// Elements of T in the arena (activations, adjoints and scratch).
    std::size_t arena_elements() const { return arena_.size(); }
    /// Node i's bf16 shadow after forward() (options::bf16_shadows: its value rounded to bf16,
    /// which the products reading it take), or null when it keeps none.
    const std::uint16_t* bf16_shadow(std::size_t i) const { return i < N ? shadow_[i] : nullptr; }
    /// The nodes of this program (not inside a repeat's block) that keep a bf16 shadow.
    static constexpr std::size_t num_bf16_shadows = std::size_t(std::count(shadowed.begin(), shadowed.end(), true));
    /// Which of them (by node index).
    static constexpr std::array<bool, N> bf16_shadowed_nodes = shadowed;
    /// The nodes of this program (not inside a repeat's block) that keep no float for backward
    /// (options::bf16_only): their shadow, where they have one, is their value; value_view() is not.
    static constexpr std::array<bool, N> bf16_only_nodes = only_plan.only;
    /// For each of them, the last node whose forward reads its float (which lives in shared scratch until then).
    static constexpr std::array<std::size_t, N> bf16_only_last = only_plan.last;
    /// Whose adjoint memory node i's adjoint is (detail::adjoint_roots): its own, or that of its
    /// only reader where that one's VJP for it is the identity (a reshape, a residual sum); an
    /// output's adjoint is seeded, and shared with none.
    static constexpr std::array<std::size_t, N> adjoint_root = [] {
        std::array<bool, N> planned{};
        for (std::size_t i = 0; i < N; ++i) planned[i] = G::needs_grad[i] && G::kind[i] == leaf_kind::none;
        for (std::size_t o : output_nodes) planned[o] = false;
        return detail::adjoint_roots(G::arity, G::operands, G::identity_vjp, planned);
    }();
    /// What the repeats' layer frames keep in this program (their scratch_size's fifth argument): 0
    /// floats only, 1 bf16 shadows too, 2 values in bf16 only, 3 those that VJPs read rounded too.
    static constexpr int bf16_frames = bf16_level;
    /// Of them, those whose op writes the shadow alone (no float at all: value_view(i) is null).
    static constexpr std::array<bool, N> bf16_no_float_nodes = only_plan.no_float;

    /// The value of dimension letter c bound by the last forward() (0 when unbound).
    std::size_t dim_value(char c) const {
        int j = G::symbol_index(c);
        return j < 0 ? 0 : env_[std::size_t(j)];
    }

    /// The model's summary at the given sizes of its dynamic dimensions, without running: per
    /// module its parameters, forward and backward FLOPs and arena bytes, and the whole arena (see
    /// graph/summary.hpp): prog.summary({{'B', 16}, {'T', 64}}).to_string().
    model_summary summary(std::initializer_list<std::pair<char, std::size_t>> sizes = {}) const {
        return detail::summarize<program>(sizes);
    }

    // ---------------------------------------------------------------- printing
    /// One line per node: "%3 = matmul(%1, %2) : (B,256)  [adjoint]".
    std::string to_text() const {
        std::ostringstream os;
        os << "program: " << N << " nodes, " << G::num_params << " parameters, " << G::num_inputs
           << " inputs, outputs:";
        for (auto o : output_nodes) os << " %" << o;
        os << "\n";
        for (std::size_t i = 0; i < N; ++i) {
            os << "%" << i << " = " << node_text(i) << " : " << shape_text(i);
            if (G::needs_grad[i]) os << "  [adjoint]";
            if (G::kind[i] == leaf_kind::none) os << "  last use %" << G::last_use[i];
            os << "\n";
        }
        return os.str();
    }
    /// The graph in Graphviz DOT (operands point to their users).
    std::string to_dot() const {
        std::ostringstream os;
        os << "digraph ctgraph {\n  rankdir=TB;\n  node [fontname=\"monospace\"];\n";
        for (std::size_t i = 0; i < N; ++i) {
            const char* shp = G::kind[i] == leaf_kind::param ? "box" : G::is_leaf(i) ? "ellipse" : "rect";
            os << "  n" << i << " [shape=" << shp << ", label=\"%" << i << " " << escape(node_text(i)) << "\\n"
               << shape_text(i) << "\"";
            if (G::kind[i] == leaf_kind::param) os << ", style=filled, fillcolor=\"#fde9c8\"";
            os << "];\n";
        }
        for (std::size_t i = 0; i < N; ++i)
            for (std::size_t k = 0; k < G::arity[i]; ++k) os << "  n" << G::operands[i][k] << " -> n" << i << ";\n";
        os << "}\n";
        return os.str();
    }

private:
    // ---------------------------------------------------------------- adjoint writes
    // The arena's adjoints are written by their first writer in backward order; outputs are seeded
    // instead. Parameters' gradients accumulate in the store (adj_writes), except in the first
    // backward after zero_grad() (adj_writes_after_zero: their first writer assigns too).
    static constexpr auto adj_write_table(bool params_owned) {
        std::array<bool, N> owned{}, runs{};
        for (std::size_t i = 0; i < N; ++i) {
            runs[i] = G::needs_grad[i];
            owned[i] = G::needs_grad[i] && (params_owned || G::kind[i] != leaf_kind::param);
        }
        for (std::size_t i : output_nodes) owned[i] = false;
        return detail::adj_write_modes(G::arity, G::operands, owned, runs);
    }
    static constexpr auto adj_writes = adj_write_table(false);
    static constexpr auto adj_writes_after_zero = adj_write_table(true);
    /// Parameter p's gradient is written by a first writer in adj_writes_after_zero.
    static constexpr std::array<bool, G::num_params> param_written_fresh = [] {
        std::array<bool, G::num_params> r{};
        for (std::size_t p = 0; p < G::num_params; ++p) {
            const std::size_t i = G::param_nodes[p];
            bool out = false;
            for (std::size_t o : output_nodes) out = out || o == i;
            r[p] = G::needs_grad[i] && !out && !adj_writes_after_zero.orphan[i];
        }
        return r;
    }();
    /// Adjoints backward zeroes before the first VJP: the outputs' (seeded) and those no VJP writes.
    static constexpr bool zeroed_at_start(std::size_t i) {
        bool out = false;
        for (std::size_t o : output_nodes) out = out || o == i;
        return adj_writes.orphan[i] || (out && G::needs_grad[i] && G::kind[i] != leaf_kind::param);
    }
    static constexpr std::size_t num_zeroed_up_front = [] {
        std::size_t n = 0;
        for (std::size_t i = 0; i < N; ++i) n += zeroed_at_start(i);
        return n;
    }();
    static constexpr std::array<std::size_t, num_zeroed_up_front> zeroed_up_front = [] {
        std::array<std::size_t, num_zeroed_up_front> r{};
        std::size_t n = 0;
        for (std::size_t i = 0; i < N; ++i)
            if (zeroed_at_start(i)) r[n++] = i;
        return r;
    }();

    // ---------------------------------------------------------------- compile-time lookups
    /// The node of the leaf named Name; -1 when there is none.
    template <fixed_string Name>
    static constexpr int leaf_index = [] {
        for (std::size_t i = 0; i < N; ++i)
            if (G::is_leaf(i) && G::kind[i] != leaf_kind::constant && G::label[i] == Name.view()) return int(i);
        return -1;
    }();
    /// The same, for an entry point: a missing name is its one error (the checks that follow pass
    /// when the name is missing, so they do not add a second).
    template <fixed_string Name>
    static constexpr int leaf() {
        static_assert(with_name<(leaf_index<Name> >= 0), Name>::value,
                      "ctg::program: no leaf of this name in the program");
        return leaf_index<Name> < 0 ? 0 : leaf_index<Name>;
    }
    template <fixed_string Name>
    static constexpr std::size_t param_ordinal() {
        constexpr int i = leaf<Name>();
        static_assert(with_name<leaf_index<Name> < 0 || G::kind[i] == leaf_kind::param, Name>::value,
                      "ctg::program::param: this leaf is not a parameter");
        for (std::size_t p = 0; p < G::num_params; ++p)
            if (G::param_nodes[p] == std::size_t(i)) return p;
        return 0;
    }
    static constexpr std::size_t input_ordinal(std::size_t i) {
        for (std::size_t k = 0; k < G::num_inputs; ++k)
            if (G::input_nodes[k] == i) return k;
        return 0;
    }

    // ---------------------------------------------------------------- shapes
    static rshape static_shape(std::size_t i) { return detail::concrete_shape(tables, i); }
    void bind_memory(std::string_view name, void* data, const rshape& s, bool bf16) {
        const std::size_t k = detail::input_by_name(tables, name, false);
        if (G::is_bf16[G::input_nodes[k]] != bf16)
            throw error("ctg::program::bind: input '" + std::string(name) + "' is " +
                        (bf16 ? "a floating-point input, given bf16 memory" : "a bf16_input, given floating-point memory"));
        const rshape checked = detail::check_input_shape(tables, G::input_nodes[k], s);
        input_slot& slot = inputs_[k];
        slot.external = data;
        slot.shape = checked;
        slot.fed = true;
    }
    input_slot& set_shape(std::size_t k, const rshape& s) { return detail::set_input_shape(tables, inputs_.data(), k, s); }

    // The views of results: xtensor adaptors, whose type <ctgraph/xtensor.hpp> gives (dependent on
    // P, so that a program that reads raw pointers never needs it).
    template <class P>
    static auto adapt(P* p, const rshape& s) {
        if constexpr (detail::tensor_views_defined<P>) {
            return detail::tensor_views<P>::adapt(p, s);
        } else {
            static_assert(detail::tensor_views_defined<P>,
                          "ctg::program: param, grad, output, value_of, adjoint_of and input_grad give xtensor views: "
                          "#include <ctgraph/xtensor.hpp> (or read raw memory: output_data, node_shape, params())");
            return p;
        }
    }

    // ---------------------------------------------------------------- planning
    // Binds the dimension letters from the inputs (throwing on disagreement), plans the arena when
    // the sizes changed, and points every view at its memory.
    void prepare() {
        std::array<std::size_t, G::num_symbols + 1> env{};
        std::array<int, G::num_symbols + 1> bound_by{};
        detail::bind_dimensions(tables, inputs_.data(), env.data(), bound_by.data());
        bool same = planned_;
        for (std::size_t j = 0; j < G::num_symbols; ++j) same = same && env_[j] == env[j];
        if (!same) {
            for (std::size_t j = 0; j < G::num_symbols; ++j) env_[j] = env[j];
            plan();
        }
        bind_leaves();
    }

    /// The ops' forward scratch (op.hpp), or their backward scratch (of the nodes whose VJP runs).
    template <bool Backward, std::size_t... I>
    void transient_sizes(std::array<std::size_t, N>& out, std::index_sequence<I...>) const {
        ((out[I] = !Backward || G::needs_grad[I] ? detail::transient_size_of<detail::op_of_t<node_t<I>>, G::arity[I], Backward>(
                                                       shapes_.data(), &G::operands[0][0], G::max_arity, I, bf16_level)
                                                 : 0),
         ...);
    }
    template <std::size_t... I>
    void scratch_sizes(std::array<std::size_t, N>& out, std::index_sequence<I...>) const {
        // (a node without an adjoint runs forward only: exec_state::forward_only_without_adjoint)
        ((out[I] = detail::scratch_size_of<detail::op_of_t<node_t<I>>, G::arity[I]>(
              shapes_.data(), &G::operands[0][0], G::max_arity, I, Opt.inference || !G::needs_grad[I], recompute,
              bf16_level)),
         ...);
    }

    void plan() {
        for (std::size_t i = 0; i < N; ++i) shapes_[i] = detail::concrete_shape(tables, i, env_.data());
        std::array<std::size_t, N> scratch{};
        scratch_sizes(scratch, std::make_index_sequence<N>{});
        std::array<std::size_t, N> val_off{}, adj_off{}, scr_off{};
        std::size_t off = 0;
        for (std::size_t i = 0; i < N; ++i)
            if ((G::kind[i] == leaf_kind::none && !G::aliases[i] && !values_by_lifetime && !only_plan.only[i]) ||
                G::kind[i] == leaf_kind::constant) {
                val_off[i] = off;
                off += round_up_elems<T>(shapes_[i].size());
            }
        if constexpr (values_by_lifetime) {
            off += place_values_by_lifetime(scratch, val_off, scr_off, off);
        } else {
            for (std::size_t i = 0; i < N; ++i)
                if (G::needs_grad[i] && G::kind[i] != leaf_kind::param && adjoint_root[i] == i) {
                    adj_off[i] = off;
                    off += round_up_elems<T>(shapes_[i].size());
                }
            for (std::size_t i = 0; i < N; ++i) adj_off[i] = adj_off[adjoint_root[i]];
            for (std::size_t i = 0; i < N; ++i) {
                scr_off[i] = off;
                off += round_up_elems<T>(scratch[i]);
            }
        }
        std::array<std::size_t, N> sh_off{};  // bf16 shadows: (size + 1) / 2 floats hold a value's bf16 elements
        std::array<std::size_t, N> fs_size{}, fs_off{};  // forward scratch (with values in bf16 only)
        if constexpr (any_shadowed)
            for (std::size_t i = 0; i < N; ++i)
                if (shadowed[i]) {
                    sh_off[i] = off;
                    off += round_up_elems<T>((shapes_[i].size() + 1) / 2);
                }
        // One region for what lives during forward alone and what lives during one VJP alone: the
        // ops' backward scratch (op.hpp), all at its start (one VJP runs at a time).
        const std::size_t transients = off;
        std::array<std::size_t, N> bs_size{};
        if constexpr (!Opt.inference) transient_sizes<true>(bs_size, std::make_index_sequence<N>{});
        std::size_t region = 0;
        for (std::size_t i = 0; i < N; ++i) region = std::max(region, round_up_elems<T>(bs_size[i]));
        if constexpr (any_bf16_only) {  // their floats, and the ops' forward scratch (op.hpp): by lifetime, in forward
            transient_sizes<false>(fs_size, std::make_index_sequence<N>{});
            std::array<std::size_t, N> at{};
            const std::size_t extent = detail::place_forward_transients(
                [](std::size_t i) { return float_transient(i); }, only_plan.last,
                [this](std::size_t i) { return round_up_elems<T>(shapes_[i].size()); }, fs_size,
                [](std::size_t e) { return round_up_elems<T>(e); }, at, fs_off);
            for (std::size_t i = 0; i < N; ++i) {
                if (float_transient(i)) val_off[i] = transients + at[i];
                if (fs_size[i]) fs_off[i] += transients;
            }
            region = std::max(region, extent);
        }
        off += region;
        if (arena_.size() < off) arena_.resize(off);
        if (poison_) std::fill(arena_.begin(), arena_.end(), std::numeric_limits<T>::quiet_NaN());
        detail::arena_placement at{val_off.data(), adj_off.data(), scratch.data(), scr_off.data(), fs_size.data(),
                                   fs_off.data(),  bs_size.data(), transients,     only_plan.no_float.data()};
        if constexpr (any_shadowed) at.shadowed = shadowed.data(), at.shadow_at = sh_off.data();
        detail::point_views(tables, at, arena_.data(), shapes_.data(),
                            {val_.data(), adj_.data(), scratch_.data(), transient_.data(), backward_transient_.data(), shadow_.data()});
        for (std::size_t o = 0; o < num_outputs; ++o) seeds_[o].assign(shapes_[output_nodes[o]].size(), T(0));
        planned_ = true;
    }
    // An inference program's computed values and op scratch, first fit by lifetime from `base`:
    // node i's value is live from its forward to value_until[i], its scratch during its forward.
    // Returns the extent. (No adjoints: inference programs have none.)
    std::size_t place_values_by_lifetime(const std::array<std::size_t, N>& scratch, std::array<std::size_t, N>& val_off,
                                         std::array<std::size_t, N>& scr_off, std::size_t base) const {
        static_assert(std::none_of(G::needs_grad.begin(), G::needs_grad.end(), [](bool b) { return b; }));
        const std::size_t extent = detail::place_forward_frame(
            value_until, [](std::size_t i) { return G::kind[i] == leaf_kind::none && !G::aliases[i]; },
            [this](std::size_t i) { return round_up_elems<T>(shapes_[i].size()); },
            [&scratch](std::size_t i) { return round_up_elems<T>(scratch[i]); }, val_off, scr_off);
        for (std::size_t i = 0; i < N; ++i) {
            if (G::kind[i] == leaf_kind::none && !G::aliases[i]) val_off[i] += base;
            scr_off[i] += base;
        }
        return extent;
    }

    // options::weights: the store keeps a quantised copy of every parameter that a product reads as
    // its weight (graph/weights.hpp), read as W or, by a tied head, as W^T (one read both ways keeps
    // the first; the other product reads the float). quantize() and refresh_quantized() are found
    // by argument-dependent lookup where the program is instantiated, in graph/ctgraph/quant_store.hpp
    // (included by ctgraph/quantize.hpp, which such a program includes; the static_assert above says
    // so): a program that quantises nothing does not even parse them.
    void quantize_weights() {
        constexpr auto reads = detail::weight_reads<G>();
        for (std::size_t p = 0; p < G::num_params; ++p) {
            const std::uint8_t r = reads[G::param_nodes[p]];
            if (r & detail::read_as_weight) quantize(*store_, param_slot_[p], Opt.weights, false);
            else if (r & detail::read_as_transposed_weight) quantize(*store_, param_slot_[p], Opt.weights, true);
        }
    }

    // Leaves point into the parameter store and the input buffers (which may have moved since).
    void bind_leaves() {
        detail::bind_leaves(tables, val_.data(), adj_.data(), *store_, param_slot_.data(), inputs_.data(), !Opt.inference);
    }

    // ---------------------------------------------------------------- execution
    detail::exec_state state(bool params_fresh = false) const {
        detail::exec_state s{val_.data(), adj_.data(), scratch_.data(), shapes_.data(), G::needs_grad.data(), G::elem.data(),
                             G::label.data(), &G::operands[0][0], G::max_arity,
                             {training_, dropout_seed_, passes_, Opt.inference, Opt.precision == precision::bf16, recompute},
                             params_fresh ? &adj_writes_after_zero.mode[0][0] : &adj_writes.mode[0][0],
                             any_shadowed ? shadow_.data() : nullptr, any_bf16_only ? only_plan.only.data() : nullptr,
                             any_bf16_only ? transient_.data() : nullptr, backward_transient_.data()};
        s.run.bf16_shadows = bf16_shadows;
        s.run.weights = quantised_weights ? Opt.weights : weight_format::f32;
        s.run.bf16_only = bf16_only_on;
        s.run.bf16_saved = bf16_saved_on;
        s.forward_only_without_adjoint = true;  // (scratch_sizes sizes such nodes so)
        return s;
    }
    template <std::size_t... I>
    void run_forward(std::index_sequence<I...>) {
        const detail::exec_state s = state();
        (detail::exec_forward<detail::op_of_t<node_t<I>>, G::arity[I], T, Opt.detect_anomaly>(s, I), ...);
    }
    // The layer count of each node's op when its backward reports layers (repeat), else 0.
    static constexpr std::array<std::size_t, N + 1> node_layers = []<std::size_t... I>(std::index_sequence<I...>) {
        return std::array<std::size_t, N + 1>{detail::op_layers<detail::op_of_t<node_t<I>>>..., 0};
    }(std::make_index_sequence<N>{});
    // Parameters whose rows are final layer by layer: the node completing the gradient
    // (param_final_at; every other reader's VJP has run before it) is a layered op that reads the
    // parameter once, as a layered operand with a leading axis of its layers. Anything else (a
    // stacked parameter also read outside the repeat: its last reader is then another node, or the
    // same one twice) is reported whole, after the node, as by on_final(slot).
    static constexpr std::array<bool, G::num_params + 1> param_by_layer = []<std::size_t... I>(std::index_sequence<I...>) {
        constexpr std::array<bool (*)(std::size_t), N> layered{&detail::op_layered_operand<detail::op_of_t<node_t<I>>>...};
        std::array<bool, G::num_params + 1> r{};
        for (std::size_t p = 0; p != G::num_params; ++p) {  // (!=: no -Wtype-limits warning when there are none)
            const std::size_t f = G::param_final_at[p], i = G::param_nodes[p];
            if (f == N || node_layers[f] == 0 || G::rank[i] == 0 || G::layer_axes[i] == 0 || G::dims[i][0].sym ||
                std::size_t(G::dims[i][0].n) != node_layers[f])
                continue;
            std::size_t reads = 0;
            bool ok = true;
            for (std::size_t k = 0; k < G::arity[f]; ++k)
                if (std::size_t(G::operands[f][k]) == i) ++reads, ok = ok && layered[f](k);
            r[p] = ok && reads == 1;
        }
        return r;
    }(std::make_index_sequence<N>{});
    static constexpr std::array<bool, N + 1> reports_layers = [] {
        std::array<bool, N + 1> r{};
        for (std::size_t p = 0; p < G::num_params; ++p) r[G::param_final_at[p]] = r[G::param_final_at[p]] || param_by_layer[p];
        return r;
    }();

    // What run_backward hands a layered op (run_info::after_layer): the node it runs, to report
    // that node's parameters' rows of layer l.
    template <class OnFinal>
    struct layer_reporter {
        const program* self;
        OnFinal* on_final;
        std::size_t node = 0;
        static void call(const void* ctx, std::size_t l) {
            const auto* r = static_cast<const layer_reporter*>(ctx);
            r->self->finalize_layer(r->node, l, *r->on_final);
        }
    };
    // After each node's VJP, the parameters it completes (a constant test per node, folded away
    // where there are none; nothing at all without a hook). A range hook hears of a layered op's
    // rows during its backward, through the state of that node only.
    template <class OnFinal, std::size_t... I>
    void run_backward(OnFinal& on_final, bool params_fresh, std::index_sequence<I...>) {
        const detail::exec_state s = state(params_fresh);
        constexpr bool hook = !std::is_same_v<std::decay_t<OnFinal>, detail::no_final_hook>;
        constexpr bool by_layer = detail::range_final_hook<OnFinal>;
        layer_reporter<OnFinal> reporter{this, &on_final};
        const layer_hook after{&layer_reporter<OnFinal>::call, &reporter};
        detail::exec_state layered = s;
        layered.run.after_layer = &after;
        auto at = [&](std::size_t i) -> const detail::exec_state& { return reporter.node = i, layered; };
        ((detail::exec_backward<detail::op_of_t<node_t<N - 1 - I>>, G::arity[N - 1 - I], G::needs_grad[N - 1 - I], T,
                                Opt.detect_anomaly>(by_layer && reports_layers[N - 1 - I] ? at(N - 1 - I) : s, N - 1 - I),
          (hook && G::final_count[N - 1 - I] ? finalize(N - 1 - I, on_final) : void())),
         ...);
    }
    // The parameters node i completes (those reported by layer already, for a range hook, excepted).
    template <class OnFinal>
    void finalize(std::size_t i, OnFinal& on_final) const {
        for (std::size_t k = G::final_begin[i]; k < G::final_begin[i] + G::final_count[i]; ++k) {
            const std::size_t p = G::final_order[k];
            if (!G::needs_grad[G::param_nodes[p]]) continue;  // frozen (options::frozen): no gradient, no update
            if constexpr (detail::range_final_hook<OnFinal>) {
                if (!param_by_layer[p]) on_final(param_slot_[p], std::size_t(0), static_shape(G::param_nodes[p]).size());
            } else {
                on_final(param_slot_[p]);
            }
        }
    }
    // Layer l's rows of the parameters node i (a layered op) completes by layer.
    template <class OnFinal>
    void finalize_layer(std::size_t i, std::size_t l, OnFinal& on_final) const {
        if constexpr (detail::range_final_hook<OnFinal>)  // (a hook of slots is never installed)
            for (std::size_t k = G::final_begin[i]; k < G::final_begin[i] + G::final_count[i]; ++k)
                if (const std::size_t p = G::final_order[k]; param_by_layer[p] && G::needs_grad[G::param_nodes[p]]) {
                    const std::size_t rows = static_shape(G::param_nodes[p]).size() / node_layers[i];
                    on_final(param_slot_[p], l * rows, rows);
                }
    }
    // After the pass: the parameters nothing reads, then the store's other parameters (another
    // program's), as optimizer.step(store) would.
    template <class OnFinal>
    void finalize_rest(OnFinal& on_final) const {
        finalize(N, on_final);
        const std::size_t slots = store_->size();
        for (std::size_t slot = 0, p = 0; slot < slots; ++slot) {
            while (p < G::num_params && sorted_slots_[p] < slot) ++p;
            if ((p == G::num_params || sorted_slots_[p] != slot) && !store_->frozen(slot)) {
                if constexpr (detail::range_final_hook<OnFinal>) on_final(slot, std::size_t(0), store_->at(slot).shape.size());
                else on_final(slot);
            }
        }
    }

    // ---------------------------------------------------------------- printing helpers
    template <std::size_t... I>
    static std::array<std::string, N> op_texts(std::index_sequence<I...>) {
        return {detail::describe_op<detail::op_of_t<node_t<I>>>()...};
    }
    static std::string node_text(std::size_t i) {
        static const std::array<std::string, N> ops = op_texts(std::make_index_sequence<N>{});
        const std::string name(G::label[i]);
        switch (G::kind[i]) {
            case leaf_kind::param: return "param \"" + name + "\"";
            case leaf_kind::input: return (G::is_bf16[i] ? "bf16_input \"" : "input \"") + name + "\"";
            case leaf_kind::index_input: return "index_input \"" + name + "\"";
            case leaf_kind::constant: {
                std::ostringstream o;
                o << "constant " << G::constant_value[i];
                return o.str();
            }
            default: break;
        }
        std::string s = ops[i] + "(";
        for (std::size_t k = 0; k < G::arity[i]; ++k) s += (k ? ", %" : "%") + std::to_string(G::operands[i][k]);
        return s + ")";
    }
    std::string shape_text(std::size_t i) const {
        std::string s = detail::declared_shape(tables, i);
        bool dynamic = false;
        for (std::size_t a = 0; a < G::rank[i]; ++a) dynamic = dynamic || G::dims[i][a].sym;
        if (planned_ && dynamic) s += "=" + to_string(shapes_[i]);
        return s;
    }
    static std::string escape(const std::string& s) {
        std::string r;
        for (char c : s) {
            if (c == '"') r += '\\';
            r += c;
        }
        return r;
    }

    std::shared_ptr<parameter_store<T>> store_;
    std::array<std::size_t, G::num_params + 1> param_slot_{};
    std::array<std::size_t, G::num_params + 1> sorted_slots_{};  // the same, ascending
    std::vector<bool> fresh_slots_;  // store slots whose gradient a first writer assigns after zero_grad
    std::array<input_slot, G::num_inputs + 1> inputs_{};
    aligned_vector<T> arena_;
    std::array<view, N> val_{}, adj_{}, scratch_{};
    std::array<view, N> transient_{};  // ops' forward scratch (op.hpp), with the floats kept in bf16 only
    std::array<view, N> backward_transient_{};  // ops' backward scratch (op.hpp), where those were
    std::array<std::uint16_t*, N> shadow_{};  // bf16 shadows (shadowed; null elsewhere)
    std::array<rshape, N> shapes_{};
    std::array<aligned_vector<T>, num_outputs> seeds_{};
    std::array<std::size_t, G::num_symbols + 1> env_{};
    bool planned_ = false, forwarded_ = false, check_finite_ = true, poison_ = false;
    bool training_ = !Opt.inference;
    std::uint64_t dropout_seed_ = 0, passes_ = 0;
};

/// The program of outputs one of which is poison: a static check failed and its static_assert has
/// said where. It offers the public interface of a program, with every member a no-op (parameters
/// in a real, empty store; results are empty views), so that the code that goes on using it
/// (feeding, training loops, optimizers, ctg::trainer, generators, checkpoints) compiles without a
/// second error: one mistake, one error.
template <class T, options Opt, class... Outs>
    requires any_poison<Outs...>
class program<T, Opt, Outs...> {
    // A program's view (an xtensor adaptor, <ctgraph/xtensor.hpp>) over no elements; without that
    // header a null pointer, so that code reading views gets no second error from here.
    template <class P = T>
    static auto empty() {
        P* none = nullptr;
        if constexpr (detail::tensor_views_defined<P>)
            return detail::tensor_views<P>::adapt(none, rshape{1, {0}});
        else
            return none;
    }

/// @cond CTG_FAILED_PROGRAM
public:
    using scalar = T;
    static constexpr std::size_t N = 0;
    static constexpr std::size_t num_outputs = sizeof...(Outs);
    static constexpr std::array<std::size_t, num_outputs> output_nodes{};

    program() : program(std::make_shared<parameter_store<T>>()) {}
    explicit program(std::shared_ptr<parameter_store<T>> store) : store_(std::move(store)) {}
    program(const program&) = delete;
    program& operator=(const program&) = delete;
    program(program&&) noexcept = default;
    program& operator=(program&&) noexcept = default;

    parameter_store<T>& params() { return *store_; }
    const parameter_store<T>& params() const { return *store_; }
    std::shared_ptr<parameter_store<T>> shared_params() const { return store_; }
    void zero_grad() {}
    template <fixed_string Name>
    auto param() { return empty(); }
    template <fixed_string Name>
    auto grad() { return empty(); }

    template <fixed_string Name>
    static constexpr bool has_input = true;
    template <fixed_string Name, class E>
    void feed(const E&) {}
    bool is_index_input(std::string_view) const { return false; }
    void feed(std::string_view, const T*, const rshape&) {}
    void bind(std::string_view, T*, const rshape&) {}
    void bind(std::string_view, kernels::bf16_bits*, const rshape&) {}
    void feed(std::string_view, const index_t*, const rshape&) {}

    T forward() { return T(0); }
    void backward() {}
    void backward(T) {}
    template <class OnFinal>
    void backward_with(OnFinal&&, T = T(1)) {}
    template <class OnFinal>
    void for_each_final(OnFinal&&) const {}
    auto seed(std::size_t) { return empty(); }
    void training(bool) {}
    bool training() const { return false; }
    void dropout_seed(std::uint64_t) {}
    std::pair<std::uint64_t, std::uint64_t> dropout_state() const { return {0, 0}; }
    void set_dropout_state(std::uint64_t, std::uint64_t) {}
    void check_finite(bool) {}
    void poison_arena(bool) {}

    template <std::size_t K = 0>
    auto output() { return empty(); }
    template <std::size_t K = 0>
    const T* output_data() const { return nullptr; }
    template <std::size_t K = 0>
    rshape output_shape() const { return rshape{}; }
    template <fixed_string Name>
    auto input_grad() { return empty(); }
    template <class E>
    auto value_of(E) { return empty(); }
    template <class E>
    auto adjoint_of(E) { return empty(); }
    const view& value_view(std::size_t) const { return none_; }
    const view& adjoint_view(std::size_t) const { return none_; }
    const rshape& node_shape(std::size_t) const { return none_.shape; }
    std::size_t arena_elements() const { return 0; }
    const std::uint16_t* bf16_shadow(std::size_t) const { return nullptr; }
    static constexpr std::size_t num_bf16_shadows = 0;
    std::size_t dim_value(char) const { return 0; }
    std::string to_text() const { return {}; }
    std::string to_dot() const { return {}; }
    model_summary summary(std::initializer_list<std::pair<char, std::size_t>> = {}) const { return {}; }

/// @endcond
private:
    std::shared_ptr<parameter_store<T>> store_;
    view none_{};
};

/// Compiles outputs (usually one scalar loss) into a program over scalar type T. When an output is
/// poison (its error was reported where it happened), the program is the no-op one above.
template <class T = float, options Opt = options{}, expr... Outs>
auto compile(Outs...) {
    static_assert(sizeof...(Outs) >= 1, "ctg::compile: give at least one output");
    return program<T, Opt, Outs...>{};
}

/// The program type compile<T, Opt>(outs...) returns, for declaring members.
template <class T, options Opt, class... Outs>
using program_for = program<T, Opt, Outs...>;

}  // namespace ctg
