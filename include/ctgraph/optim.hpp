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
#include <cmath>
#include <cstddef>
#include <numbers>
#include <string>

#include "ctgraph/error.hpp"
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
    };
    /// Throws ctg::error for Nesterov momentum without momentum.
    explicit sgd(config c) : c_(c) {
        if (c.nesterov && c.momentum <= 0) throw error("ctg::optim::sgd: Nesterov momentum needs momentum > 0");
    }
    void set_lr(double lr) { c_.lr = lr; }  ///< sets the learning rate (schedules call it each step)
    double lr() const { return c_.lr; }      ///< the learning rate
    long steps() const { return t_; }        ///< steps taken

    /// One step over every parameter of the store: begin_step(), then update() of each slot.
    void step(parameter_store<T>& ps) {
        begin_step(ps);
        for (std::size_t s = 0; s < ps.size(); ++s) update(ps, s);
    }
    /// The two halves of step(), for an update fused into the backward pass (ctg::train_step):
    /// begin_step() once, then update() of each slot once its gradient is final, in any order.
    void begin_step(const parameter_store<T>& ps) {
        const std::size_t n = ps.values().size();
        if (c_.momentum != 0 && buf_.size() != n) buf_.assign(n, T(0)), t_ = 0;
        ++t_;
    }
    /// Updates one parameter (slot) from its gradient; call after begin_step().
    void update(parameter_store<T>& ps, std::size_t slot) { update(ps, slot, 0, ps.at(slot).shape.size()); }
    /// Updates elements [first, first + count) of a parameter; each element once per step.
    void update(parameter_store<T>& ps, std::size_t slot, std::size_t first, std::size_t count) {
        const std::size_t at = ps.at(slot).offset;
        T* p = ps.value_storage(slot);  // (the bf16 copy, if any, is written below, range by range)
        parameter_store<T>* store = &ps;
        const T* g = ps.grads().data() + at;
        const T lr = T(c_.lr), mu = T(c_.momentum), wd = T(c_.weight_decay);
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
    /// element per element of the store's flat arrays; empty before the first step), the step count.
    static constexpr const char* kind = "sgd";
    /// Calls f(name, array) for each state array (checkpoints).
    template <class F>
    void for_each_state(F&& f) {
        if (c_.momentum != 0) f("momentum", buf_);
    }
    void set_steps(long t) { t_ = t; }  ///< restores the step count (checkpoints)

private:
    config c_;
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
    };
    explicit adam(config c) : c_(c) {}       ///< an optimizer with these hyper-parameters
    void set_lr(double lr) { c_.lr = lr; }  ///< sets the learning rate (schedules call it each step)
    double lr() const { return c_.lr; }      ///< the learning rate
    long steps() const { return t_; }        ///< steps taken

    /// One step over every parameter of the store: begin_step(), then update() of each slot.
    void step(parameter_store<T>& ps) {
        begin_step(ps);
        for (std::size_t s = 0; s < ps.size(); ++s) update(ps, s);
    }
    /// The two halves of step() (see sgd): the step count and bias corrections, then one slot.
    void begin_step(const parameter_store<T>& ps) {
        const std::size_t n = ps.values().size();
        if (m_.size() != n) m_.assign(n, T(0)), v_.assign(n, T(0)), t_ = 0;
        ++t_;
        // The step's constants, once (update() runs once per parameter).
        step_size_ = T(c_.lr) / T(1 - std::pow(c_.beta1, double(t_)));
        sqrt_bc2_ = std::sqrt(T(1 - std::pow(c_.beta2, double(t_))));
    }
    /// Updates one parameter (slot) from its gradient; call after begin_step().
    void update(parameter_store<T>& ps, std::size_t slot) { update(ps, slot, 0, ps.at(slot).shape.size()); }
    /// Updates elements [first, first + count) of a parameter; each element once per step.
    void update(parameter_store<T>& ps, std::size_t slot, std::size_t first, std::size_t count) {
        const std::size_t at = ps.at(slot).offset, n = ps.at(slot).shape.size();
        T* p = ps.value_storage(slot);  // (the bf16 copy, if any, is written below, range by range)
        parameter_store<T>* store = &ps;
        const T* g = ps.grads().data() + at;
        T* m = m_.data() + at;
        T* v = v_.data() + at;
        const T b1 = T(c_.beta1), b2 = T(c_.beta2), eps = T(c_.eps), wd = T(c_.weight_decay);
        const T step = step_size_, sqrt_bc2 = sqrt_bc2_;
        const T decay = c_.decoupled ? T(1 - c_.lr * c_.weight_decay) : T(1);
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

private:
    config c_;
    aligned_vector<T> m_, v_;
    long t_ = 0;
    T step_size_ = 0, sqrt_bc2_ = 0;  // lr / (1 - beta1^t), sqrt(1 - beta2^t): set by begin_step
};

/// AdamW with PyTorch's defaults (weight decay 0.01).
template <class T>
adam<T> adamw(double lr = 1e-3, double weight_decay = 1e-2, double beta1 = 0.9, double beta2 = 0.999,
              double eps = 1e-8) {
    return adam<T>({lr, beta1, beta2, eps, weight_decay, true});
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

}  // namespace ctg::optim
