// ctgraph/optim.hpp: optimizers, gradient clipping and learning-rate schedules over a parameter
// store. An optimizer's step is begin_step() (step count, state sized to the store's flat arrays)
// and then update(slot) of each parameter, one loop over its contiguous values and gradients. The
// two halves are public so that ctg::train_step can run each update inside the backward pass, right
// after the node that finishes that parameter's gradient; step() runs the very same per-slot loops,
// so the fused and the plain step give bit-identical weights. update(slot, first, count) updates
// an element range (the rules are element-wise; the step's constants come from begin_step), so a
// stacked parameter of ctg::repeat is updated layer by layer as its rows become final.
// The update rules are PyTorch's (torch.optim.SGD, Adam, AdamW), so results compare one to one.
#pragma once
#include <array>
#include <cmath>
#include <cstddef>
#include <numbers>
#include <string>
#include <vector>

#include "ctgraph/error.hpp"
#include "ctgraph/names.hpp"  // (param_group's entries)
#include "ctgraph/kernels/parallel.hpp"
#include "ctgraph/kernels/simd.hpp"
#include "ctgraph/memory.hpp"
#include "ctgraph/params.hpp"

namespace ctg::optim {

/// Parameters of at least this many elements are updated in pieces on the kernel pool (an update
/// is a few arithmetic operations per element: 8192 of them take several microseconds).
inline constexpr std::size_t parallel_update_min_size = 8192;

/// body(lo, hi) over elements [first, first + count) of a parameter, in pieces on the kernel pool
/// when the range is large: cut at 64-byte lines counted from the parameter's start, as the update
/// of the whole parameter is cut, so no SIMD batch is shared by two threads (lanes::each_within).
template <class T, class F>
void for_param_range(std::size_t first, std::size_t count, F&& body) {
    const std::size_t line = 64 / sizeof(T), from = first / line * line, end = first + count;
    kernels::for_ranges<T>(end - from, parallel_update_min_size, [&](std::size_t lo, std::size_t hi) {
        if (from + hi > first) body(std::max(from + lo, first), std::min(from + hi, end));
    });
}

/// Parameters that take another learning rate or weight decay than the optimizer's (torch.optim's
/// param_groups), chosen by name and by rank; the first group that matches a parameter decides,
/// and a parameter no group matches takes the optimizer's own. The usual GPT recipe, decay the
/// matrices only, is one group: `adamw<float>({.lr = 6e-4, .weight_decay = 0.1, .groups =
/// {{.max_rank = 1, .weight_decay = 0}}})`. A checkpoint records the groups, and a resume with
/// other groups is refused.
struct param_group {
    /// The parameters, as options::frozen's entries (names, prefixes cut at a '.', '*' patterns),
    /// separated by spaces or commas: "*.bias ln_f. tok_embed". Empty: every parameter (then by
    /// rank alone). An entry that matches no parameter of the store throws at the first step.
    std::string names{};
    /// @{ ... whose rank is within [min_rank, max_rank] (a stacked parameter's: one layer's)
    std::size_t min_rank = 0, max_rank = 8;
    /// @}
    double lr_factor = 1.0;    ///< their learning rate: the optimizer's (as its schedule sets it) times this
    double weight_decay = -1;  ///< their weight decay; negative: the optimizer's
};

namespace detail {
/// The setting of each slot of a store under a list of param_group (resolved at the first step
/// and again when the store grows).
class group_table {
public:
    struct setting {
        double lr_factor = 1, weight_decay = 0;
    };
    group_table() = default;
    explicit group_table(std::vector<param_group> groups) : groups_(std::move(groups)) {}
    /// Each slot's setting, the optimizer's weight decay `wd` where no group decides; throws
    /// ctg::error naming a group entry that matches no parameter.
    template <class T>
    void resolve(const parameter_store<T>& ps, double wd) {
        if (settings_.size() == ps.size() && wd == wd_) return;
        wd_ = wd;
        settings_.assign(ps.size(), setting{1.0, wd});
        std::vector<bool> used(groups_.size(), false);
        for (std::size_t s = 0; s < ps.size(); ++s) {
            const auto& e = ps.at(s);
            const std::size_t rank = e.shape.rank - e.layer_axes;
            for (std::size_t k = 0; k < groups_.size(); ++k)
                if (matches(groups_[k], e.name, rank)) {
                    settings_[s] = {groups_[k].lr_factor, groups_[k].weight_decay < 0 ? wd : groups_[k].weight_decay};
                    break;
                }
        }
        for (std::size_t k = 0; k < groups_.size(); ++k) {
            const std::string& list = groups_[k].names;
            ctg::detail::for_each_entry(list, [&](std::string_view entry) {
                bool found = false;
                for (std::size_t s = 0; s < ps.size() && !found; ++s) found = ctg::detail::name_matches(entry, ps.at(s).name);
                if (!found)
                    throw error("ctg::optim: parameter group " + std::to_string(k) + "'s entry '" + std::string(entry) +
                                "' matches no parameter of the store");
            });
        }
    }
    const setting& operator[](std::size_t slot) const { return settings_[slot]; }
    bool empty() const { return groups_.empty(); }
    /// The groups as text (checkpoints compare it), '; ' between them.
    std::string describe() const {
        std::string r;
        for (const param_group& g : groups_) {
            r += (r.empty() ? "names '" : "; names '") + g.names + "' ranks " + std::to_string(g.min_rank) + ".." +
                 std::to_string(g.max_rank) + " lr x" + ctg::detail::shortest_text(g.lr_factor) + " weight decay " +
                 ctg::detail::shortest_text(g.weight_decay);
        }
        return r;
    }

private:
    static bool matches(const param_group& g, std::string_view name, std::size_t rank) {
        if (rank < g.min_rank || rank > g.max_rank) return false;
        bool any = false, hit = false;
        ctg::detail::for_each_entry(g.names, [&](std::string_view e) { any = true, hit = hit || ctg::detail::name_matches(e, name); });
        return !any || hit;
    }
    std::vector<param_group> groups_;
    std::vector<setting> settings_;
    double wd_ = 0;
};
}  // namespace detail

/// SGD with optional momentum (dampening 0), Nesterov momentum and L2 weight decay:
///   g += wd p;  b = mu b + g (b = g on the first step);  g = nesterov ? g + mu b : b;  p -= lr g
template <class T>
class sgd {
public:
    /// The hyper-parameters, as torch.optim.SGD's: `sgd<float>({.lr = 0.05, .momentum = 0.9})`.
    struct config {
        /// @{ the learning rate, the momentum mu (0: none) and the L2 weight decay
        double lr = 0.01, momentum = 0.0, weight_decay = 0.0;
        /// @}
        bool nesterov = false;  ///< Nesterov momentum (needs momentum > 0)
        std::vector<param_group> groups{};  ///< parameters with another learning rate or weight decay
    };
    /// Throws ctg::error for Nesterov momentum without momentum.
    explicit sgd(config c) : c_(c), groups_(c.groups) {
        if (c.nesterov && c.momentum <= 0) throw error("ctg::optim::sgd: Nesterov momentum needs momentum > 0");
    }
    void set_lr(double lr) { c_.lr = lr; }  ///< sets the learning rate (schedules call it each step)
    double lr() const { return c_.lr; }      ///< the learning rate
    long steps() const { return t_; }        ///< steps taken

    /// One step over every parameter of the store: begin_step(), then update() of each slot.
    [[gnu::noinline]] void step(parameter_store<T>& ps) {  // (noinline: compiled once, CTG_OPTIM_INSTANCES)
        begin_step(ps);
        for (std::size_t s = 0; s < ps.size(); ++s)
            if (!ps.frozen(s)) update(ps, s);
    }
    /// The two halves of step(), for an update fused into the backward pass (ctg::train_step):
    /// begin_step() once, then update() of each slot once its gradient is final, in any order.
    void begin_step(const parameter_store<T>& ps) {
        const std::size_t n = ps.grad_elements();  // (the parameters that train)
        if (c_.momentum != 0 && buf_.size() != n) buf_.assign(n, T(0)), t_ = 0;
        groups_.resolve(ps, c_.weight_decay);
        ++t_;
    }
    /// Updates one parameter (slot) from its gradient; call after begin_step().
    void update(parameter_store<T>& ps, std::size_t slot) { update(ps, slot, 0, ps.at(slot).shape.size()); }
    /// Updates elements [first, first + count) of a parameter; each element once per step. A frozen
    /// parameter (parameter_store::set_frozen) throws ctg::error.
    [[gnu::noinline]] void update(parameter_store<T>& ps, std::size_t slot, std::size_t first, std::size_t count) {
        const T* g = ps.grad(slot);  // (throws for a frozen one)
        const std::size_t at = ps.at(slot).grad_offset;
        T* p = ps.value_storage(slot);  // (the bf16 copy, if any, is written below, range by range)
        parameter_store<T>* store = &ps;
        const auto& group = groups_[slot];
        const T lr = T(c_.lr * group.lr_factor), mu = T(c_.momentum), wd = T(group.weight_decay);
        if (c_.momentum == 0) {
            for_param_range<T>(first, count, [=](std::size_t lo, std::size_t hi) {
                for (std::size_t i = lo; i < hi; ++i) p[i] -= lr * (g[i] + wd * p[i]);
                store->write_bf16(slot, lo, hi);
            });
            return;
        }
        T* b = buf_.data() + at;
        const bool initial = t_ == 1, nesterov = c_.nesterov;
        for_param_range<T>(first, count, [=](std::size_t lo, std::size_t hi) {
            for (std::size_t i = lo; i < hi; ++i) {
                const T gi = g[i] + wd * p[i];
                b[i] = initial ? gi : mu * b[i] + gi;
                p[i] -= lr * (nesterov ? gi + mu * b[i] : b[i]);
            }
            store->write_bf16(slot, lo, hi);
        });
    }

    /// Checkpoints (ctgraph/checkpoint.hpp): the kind, f(name, array) for each state array (one
    /// element per element of the store's gradients, grads(); empty before the first step), the step count.
    static constexpr const char* kind = "sgd";
    /// Calls f(name, array) for each state array (checkpoints).
    template <class F>
    void for_each_state(F&& f) {
        if (c_.momentum != 0) f("momentum", buf_);
    }
    void set_steps(long t) { t_ = t; }  ///< restores the step count (checkpoints)
    std::string groups_text() const { return groups_.describe(); }  ///< the parameter groups (checkpoints compare them)

private:
    config c_;
    detail::group_table groups_;
    aligned_vector<T> buf_;
    long t_ = 0;  // steps taken; the first one sets the momentum buffer to the gradient
};

/// Adam (weight_decay as L2, added to the gradient) or AdamW (decoupled: p *= 1 - lr wd first).
template <class T>
class adam {
public:
    /// The hyper-parameters, as torch.optim.Adam's and AdamW's: `adam<float>({.lr = 3e-4})`.
    struct config {
        /// @{ the learning rate, the moment decay rates beta1 and beta2, epsilon, and the weight decay
        double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
        /// @}
        bool decoupled = false;  ///< true: AdamW (decoupled weight decay)
        std::vector<param_group> groups{};  ///< parameters with another learning rate or weight decay
    };
    explicit adam(config c) : c_(c), groups_(c.groups) {}  ///< an optimizer with these hyper-parameters
    void set_lr(double lr) { c_.lr = lr; }  ///< sets the learning rate (schedules call it each step)
    double lr() const { return c_.lr; }      ///< the learning rate
    long steps() const { return t_; }        ///< steps taken

    /// One step over every parameter of the store: begin_step(), then update() of each slot.
    [[gnu::noinline]] void step(parameter_store<T>& ps) {  // (noinline: compiled once, CTG_OPTIM_INSTANCES)
        begin_step(ps);
        for (std::size_t s = 0; s < ps.size(); ++s)
            if (!ps.frozen(s)) update(ps, s);
    }
    /// The two halves of step() (see sgd): the step count and bias corrections, then one slot.
    void begin_step(const parameter_store<T>& ps) {
        const std::size_t n = ps.grad_elements();  // (the parameters that train)
        if (m_.size() != n) m_.assign(n, T(0)), v_.assign(n, T(0)), t_ = 0;
        groups_.resolve(ps, c_.weight_decay);
        ++t_;
        // The step's constants, once (update() runs once per parameter).
        bc1_ = T(1 - std::pow(c_.beta1, double(t_)));
        step_size_ = T(c_.lr) / bc1_;
        sqrt_bc2_ = std::sqrt(T(1 - std::pow(c_.beta2, double(t_))));
    }
    /// Updates one parameter (slot) from its gradient; call after begin_step().
    void update(parameter_store<T>& ps, std::size_t slot) { update(ps, slot, 0, ps.at(slot).shape.size()); }
    /// Updates elements [first, first + count) of a parameter; each element once per step.
    [[gnu::noinline]] void update(parameter_store<T>& ps, std::size_t slot, std::size_t first, std::size_t count) {
        const T* g = ps.grad(slot);  // (throws for a frozen one)
        const std::size_t at = ps.at(slot).grad_offset, n = ps.at(slot).shape.size();
        T* p = ps.value_storage(slot);  // (the bf16 copy, if any, is written below, range by range)
        parameter_store<T>* store = &ps;
        T* m = m_.data() + at;
        T* v = v_.data() + at;
        const auto& group = groups_[slot];
        const T b1 = T(c_.beta1), b2 = T(c_.beta2), eps = T(c_.eps), wd = T(group.weight_decay);
        const T step = group.lr_factor == 1 ? step_size_ : T(c_.lr * group.lr_factor) / bc1_, sqrt_bc2 = sqrt_bc2_;
        const T decay = c_.decoupled ? T(1 - c_.lr * group.lr_factor * group.weight_decay) : T(1);
        const T l2 = c_.decoupled ? T(0) : wd;
        // In SIMD lanes: std::sqrt keeps a scalar loop scalar (errno), and this loop was 4-8 % of a
        // training step (rnn, s2s, gpt-s) before.
        // (each_within: the batches of the whole parameter's loop, whatever the range: bit for bit)
        for_param_range<T>(first, count, [=](std::size_t lo, std::size_t hi) {
            namespace lanes = kernels::lanes;
            lanes::each_within<T>(n, lo, hi, [&](std::size_t i, auto tag) {
                using V = decltype(tag);
                using std::sqrt;
                const V pi = lanes::load<V>(p + i) * V(decay);
                const V gi = lanes::load<V>(g + i) + V(l2) * pi;
                const V mi = V(b1) * lanes::load<V>(m + i) + V(1 - b1) * gi;
                const V vi = V(b2) * lanes::load<V>(v + i) + V(1 - b2) * gi * gi;
                lanes::store(m + i, mi);
                lanes::store(v + i, vi);
                lanes::store(p + i, pi - V(step) * mi / (sqrt(vi) / V(sqrt_bc2) + V(eps)));
            }, p, m, v);
            store->write_bf16(slot, lo, hi);  // while the range is in L1
        });
    }

    /// Checkpoints: as sgd's (the moment estimates m and v).
    static constexpr const char* kind = "adam";
    /// Calls f(name, array) for each state array (checkpoints).
    template <class F>
    void for_each_state(F&& f) {
        f("m", m_);
        f("v", v_);
    }
    void set_steps(long t) { t_ = t; }  ///< restores the step count (checkpoints)
    std::string groups_text() const { return groups_.describe(); }  ///< the parameter groups (checkpoints compare them)

private:
    config c_;
    detail::group_table groups_;
    aligned_vector<T> m_, v_;
    long t_ = 0;
    T bc1_ = 1, step_size_ = 0, sqrt_bc2_ = 0;  // 1 - beta1^t, lr / that, sqrt(1 - beta2^t): set by begin_step
};

/// AdamW's hyper-parameters in torch.optim.AdamW's order and with its defaults:
/// `adamw<float>({.lr = 6e-4, .betas = {0.9, 0.95}, .weight_decay = 0.1})`. Named fields, so that no
/// number can be taken for another (PyTorch's positional order, lr, betas, eps, weight_decay, is
/// the aggregate's order too).
struct adamw_config {
    double lr = 1e-3;                          ///< the learning rate
    std::array<double, 2> betas{0.9, 0.999};  ///< the moment decay rates beta1, beta2
    double eps = 1e-8;                         ///< epsilon
    double weight_decay = 1e-2;                ///< the decoupled weight decay (p *= 1 - lr wd)
    std::vector<param_group> groups{};         ///< parameters with another learning rate or weight decay
};
/// AdamW (adam with decoupled weight decay), PyTorch's defaults unless given.
template <class T>
adam<T> adamw(adamw_config c = {}) {
    return adam<T>({c.lr, c.betas[0], c.betas[1], c.eps, c.weight_decay, true, std::move(c.groups)});
}

/// What ctg::train_step and ctg::trainer need of an optimizer (sgd and adam have it).
template <class O, class T>
concept optimizer_for = requires(O& o, parameter_store<T>& ps, std::size_t slot) {
    o.begin_step(ps);
    o.update(ps, slot);
    o.step(ps);
    o.set_lr(1.0);
};

/// Optimizers that also update element ranges, update(store, slot, first, count) (sgd and adam):
/// ctg::train_step then updates a stacked parameter layer by layer inside backward.
template <class O, class T>
concept range_optimizer_for = optimizer_for<O, T> && requires(O& o, parameter_store<T>& ps, std::size_t n) {
    o.update(ps, n, n, n);
};

/// Scales all gradients so that their global L2 norm is at most max_norm; returns the norm before.
template <class T>
double clip_grad_norm(parameter_store<T>& ps, double max_norm) {
    double s = 0;
    for (T g : ps.grads()) s += double(g) * double(g);
    const double norm = std::sqrt(s);
    if (!std::isfinite(norm)) throw numeric_error("ctg::optim::clip_grad_norm: the gradient norm is not finite");
    if (norm > max_norm && norm > 0) {
        const T k = T(max_norm / (norm + 1e-6));
        for (T& g : ps.grads()) g *= k;
    }
    return norm;
}

/// Learning-rate schedules: functions of the step number (0-based).
struct constant_lr {
    double lr;                                     ///< the learning rate
    double operator()(long) const { return lr; }  ///< lr at every step
};
/// lr * gamma^(step / step_size)
struct step_lr {
    /// @{ the initial rate and the factor applied every step_size steps
    double lr, gamma;
    /// @}
    long step_size;  ///< steps between two decays
    /// The rate at a step (0-based).
    double operator()(long step) const { return lr * std::pow(gamma, double(step / step_size)); }
};
/// Linear warm-up from 0 to lr over `warmup` steps, then cosine decay to min_lr at `total`.
struct warmup_cosine_lr {
    double lr;  ///< the peak rate, reached at the end of the warm-up
    /// @{ the warm-up's steps and the schedule's total steps
    long warmup, total;
    /// @}
    double min_lr = 0.0;  ///< the rate at `total` and after
    /// The rate at a step (0-based).
    double operator()(long step) const {
        if (step < warmup) return lr * double(step + 1) / double(warmup);
        if (step >= total) return min_lr;
        const double progress = double(step - warmup) / double(std::max(1L, total - warmup));
        return min_lr + 0.5 * (lr - min_lr) * (1 + std::cos(std::numbers::pi * progress));
    }
};

// The optimizers' members and clip_grad_norm for float and double are compiled once, in the
// library (include/ctgraph/compiled.cpp), where CTG_SEPARATE_COMPILATION is defined.
#define CTG_OPTIM_INSTANCES(how, T)  \
    how class sgd<T>;                \
    how class adam<T>;               \
    how double clip_grad_norm<T>(parameter_store<T>&, double);   \
    how void detail::group_table::resolve<T>(const parameter_store<T>&, double);
#if defined(CTG_SEPARATE_COMPILATION)
CTG_OPTIM_INSTANCES(extern template, float)
CTG_OPTIM_INSTANCES(extern template, double)
#endif

}  // namespace ctg::optim
