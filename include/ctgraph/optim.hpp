// ctgraph/optim.hpp: optimizers, gradient clipping and learning-rate schedules over a parameter
// store. Each optimizer runs one loop over the store's flat value/gradient arrays (the padding
// between parameters stays zero: a zero gradient and a zero value give a zero update).
// The update rules are PyTorch's (torch.optim.SGD, Adam, AdamW), so results compare one to one.
#pragma once
#include <cmath>
#include <cstddef>
#include <numbers>
#include <string>

#include "ctgraph/error.hpp"
#include "ctgraph/memory.hpp"
#include "ctgraph/params.hpp"

namespace ctg::optim {

/// SGD with optional momentum (dampening 0), Nesterov momentum and L2 weight decay:
///   g += wd p;  b = mu b + g (b = g on the first step);  g = nesterov ? g + mu b : b;  p -= lr g
template <class T>
class sgd {
public:
    struct config {
        double lr = 0.01, momentum = 0.0, weight_decay = 0.0;
        bool nesterov = false;
    };
    explicit sgd(config c) : c_(c) {
        if (c.nesterov && c.momentum <= 0) throw error("ctg::optim::sgd: Nesterov momentum needs momentum > 0");
    }
    void set_lr(double lr) { c_.lr = lr; }
    double lr() const { return c_.lr; }
    void step(parameter_store<T>& ps) {
        T* p = ps.values().data();
        const T* g = ps.grads().data();
        const std::size_t n = ps.values().size();
        const T lr = T(c_.lr), mu = T(c_.momentum), wd = T(c_.weight_decay);
        if (c_.momentum == 0) {
            for (std::size_t i = 0; i < n; ++i) p[i] -= lr * (g[i] + wd * p[i]);
            return;
        }
        if (buf_.size() != n) buf_.assign(n, T(0)), first_ = true;
        for (std::size_t i = 0; i < n; ++i) {
            const T gi = g[i] + wd * p[i];
            buf_[i] = first_ ? gi : mu * buf_[i] + gi;
            p[i] -= lr * (c_.nesterov ? gi + mu * buf_[i] : buf_[i]);
        }
        first_ = false;
    }

private:
    config c_;
    aligned_vector<T> buf_;
    bool first_ = true;
};

/// Adam (weight_decay as L2, added to the gradient) or AdamW (decoupled: p *= 1 - lr wd first).
template <class T>
class adam {
public:
    struct config {
        double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
        bool decoupled = false;  // true: AdamW
    };
    explicit adam(config c) : c_(c) {}
    void set_lr(double lr) { c_.lr = lr; }
    double lr() const { return c_.lr; }
    long steps() const { return t_; }
    void step(parameter_store<T>& ps) {
        const std::size_t n = ps.values().size();
        if (m_.size() != n) m_.assign(n, T(0)), v_.assign(n, T(0)), t_ = 0;
        ++t_;
        T* p = ps.values().data();
        const T* g = ps.grads().data();
        const T b1 = T(c_.beta1), b2 = T(c_.beta2), eps = T(c_.eps), wd = T(c_.weight_decay);
        const T bc1 = T(1 - std::pow(c_.beta1, double(t_))), bc2 = T(1 - std::pow(c_.beta2, double(t_)));
        const T step = T(c_.lr) / bc1, sqrt_bc2 = std::sqrt(bc2);
        const T decay = c_.decoupled ? T(1 - c_.lr * c_.weight_decay) : T(1);
        const T l2 = c_.decoupled ? T(0) : wd;
        for (std::size_t i = 0; i < n; ++i) {
            p[i] *= decay;
            const T gi = g[i] + l2 * p[i];
            m_[i] = b1 * m_[i] + (1 - b1) * gi;
            v_[i] = b2 * v_[i] + (1 - b2) * gi * gi;
            p[i] -= step * m_[i] / (std::sqrt(v_[i]) / sqrt_bc2 + eps);
        }
    }

private:
    config c_;
    aligned_vector<T> m_, v_;
    long t_ = 0;
};

/// AdamW with PyTorch's defaults (weight decay 0.01).
template <class T>
adam<T> adamw(double lr = 1e-3, double weight_decay = 1e-2, double beta1 = 0.9, double beta2 = 0.999,
              double eps = 1e-8) {
    return adam<T>({lr, beta1, beta2, eps, weight_decay, true});
}

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
    double lr;
    double operator()(long) const { return lr; }
};
/// lr * gamma^(step / step_size)
struct step_lr {
    double lr, gamma;
    long step_size;
    double operator()(long step) const { return lr * std::pow(gamma, double(step / step_size)); }
};
/// Linear warm-up from 0 to lr over `warmup` steps, then cosine decay to min_lr at `total`.
struct warmup_cosine_lr {
    double lr;
    long warmup, total;
    double min_lr = 0.0;
    double operator()(long step) const {
        if (step < warmup) return lr * double(step + 1) / double(warmup);
        if (step >= total) return min_lr;
        const double progress = double(step - warmup) / double(std::max(1L, total - warmup));
        return min_lr + 0.5 * (lr - min_lr) * (1 + std::cos(std::numbers::pi * progress));
    }
};

}  // namespace ctg::optim
