// examples/dates.hpp: the date-normalisation task shared by date_normalize (Bahdanau attention) and
// date_transformer (encoder-decoder Transformer): 10 input formats of one day ("3 March 2021",
// "03/03/21", "the 3rd of March, 2021", ...) -> "2021-03-03", days 1950-01-01 .. 2049-12-31, data
// generated with a fixed seed, 1,000 held-out days never used in training.
#pragma once
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <ctgraph/error.hpp>
#include <ctgraph/train.hpp>

namespace dates {

// ---------------------------------------------------------------------------- data
struct civil {
    int y, m, d, weekday;  // weekday 0 = Monday
};
// Days since 1970-01-01 -> date (Hinnant's civil_from_days).
civil from_days(long z) {
    const long wd = ((z % 7) + 7 + 3) % 7;  // 1970-01-01 was a Thursday
    z += 719468;
    const long era = (z >= 0 ? z : z - 146096) / 146097;
    const long doe = z - era * 146097;
    const long yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    const long doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    const long mp = (5 * doy + 2) / 153;
    const long d = doy - (153 * mp + 2) / 5 + 1;
    const long m = mp < 10 ? mp + 3 : mp - 9;
    return {int(yoe + era * 400 + (m <= 2)), int(m), int(d), int(wd)};
}
constexpr long first_day = -7305, last_day = 29219;  // 1950-01-01 .. 2049-12-31 (two-digit years are unambiguous)

const std::array<const char*, 12> months = {"January", "February", "March",     "April",   "May",      "June",
                                            "July",    "August",   "September", "October", "November", "December"};
const std::array<const char*, 7> weekdays = {"Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"};

std::string two(int v) { return (v < 10 ? "0" : "") + std::to_string(v); }
std::string ordinal(int d) {
    const char* suffix = (d % 10 == 1 && d != 11) ? "st" : (d % 10 == 2 && d != 12) ? "nd" : (d % 10 == 3 && d != 13) ? "rd" : "th";
    return std::to_string(d) + suffix;
}
constexpr int num_formats = 10;
std::string format(const civil& c, int f) {
    const std::string M = months[std::size_t(c.m - 1)], Mon = M.substr(0, 3), d = std::to_string(c.d), y = std::to_string(c.y);
    switch (f) {
        case 0: return d + " " + M + " " + y;                                     // 3 March 2021
        case 1: return two(c.d) + "/" + two(c.m) + "/" + two(c.y % 100);          // 03/03/21
        case 2: return M + " " + d + ", " + y;                                    // March 3, 2021
        case 3: return d + " " + Mon + " " + y;                                   // 3 Mar 2021
        case 4: return two(c.d) + "." + two(c.m) + "." + y;                       // 03.03.2021
        case 5: return Mon + " " + d + ", " + y;                                  // Mar 3, 2021
        case 6: return std::string(weekdays[std::size_t(c.weekday)]) + ", " + d + " " + M + " " + y;  // Wednesday, 3 March 2021
        case 7: return d + "/" + std::to_string(c.m) + "/" + y;                   // 3/3/2021
        case 8: return "the " + ordinal(c.d) + " of " + M + ", " + y;             // the 3rd of March, 2021
        default: return two(c.d) + "-" + Mon + "-" + y;                           // 03-Mar-2021
    }
}
std::string iso(const civil& c) { return std::to_string(c.y) + "-" + two(c.m) + "-" + two(c.d); }

// Source characters: 0 is padding; target tokens: 0..9 digits, 10 '-', 11 <sos>, 12 <eos>.
const std::string src_chars = " ,./-0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
constexpr int Vs = 1 + 67, Vt = 13, sos = 11, eos = 12, S = 28, T = 11;
int src_id(char ch) {
    const auto p = src_chars.find(ch);
    if (p == std::string::npos) throw ctg::error(std::string("dates: no source id for character '") + ch + "'");
    return int(p) + 1;
}
int tgt_id(char ch) { return ch == '-' ? 10 : ch - '0'; }
char tgt_char(int id) { return id == 10 ? '-' : id < 10 ? char('0' + id) : '?'; }

struct example {
    std::string in, out;
};
/// The held-out split and a sampler of training examples from the other days.
struct task {
    std::mt19937_64 rng{2021};
    std::uniform_int_distribution<long> day{first_day, last_day};
    std::uniform_int_distribution<int> fmt{0, num_formats - 1};
    std::set<long> test_days;
    std::vector<example> test;

    explicit task(std::size_t held_out = 1000) {
        while (test_days.size() < held_out) test_days.insert(day(rng));
        for (long z : test_days) test.push_back({format(from_days(z), fmt(rng)), iso(from_days(z))});
    }
    std::vector<example> sample(std::size_t n) {
        std::vector<example> ex;
        while (ex.size() < n) {
            const long z = day(rng);
            if (test_days.count(z)) continue;
            ex.push_back({format(from_days(z), fmt(rng)), iso(from_days(z))});
        }
        return ex;
    }
    static void describe() {
        std::printf("date normalisation: %d formats, e.g. '%s', '%s', '%s' -> '%s'\n", num_formats,
                    format(from_days(18689), 1).c_str(), format(from_days(18689), 8).c_str(),
                    format(from_days(18689), 6).c_str(), iso(from_days(18689)).c_str());
    }
};

/// The fraction of `test` that `decode` (a batch of examples -> their outputs) gets exactly right,
/// in batches of 250.
template <class Decode>
double exact_match(const std::vector<example>& test, Decode decode) {
    std::size_t right = 0;
    for (std::size_t i = 0; i < test.size(); i += 250) {
        const std::vector<example> part(test.begin() + long(i), test.begin() + long(std::min(test.size(), i + 250)));
        const auto got = decode(part);
        for (std::size_t k = 0; k < part.size(); ++k) right += got[k] == part[k].out;
    }
    return double(right) / double(test.size());
}

/// Training of both date examples, by ctg::trainer: `feed(examples)` feeds one batch to `prog`;
/// steps x batch training examples are drawn up front and read in order (one epoch, unshuffled: the
/// batches the examples have always trained on); every 200 steps and at the end, `match()` measures
/// the held-out exact match. Returns the final exact match and prints it with the training time.
template <class Program, class Optimizer, class Schedule, class Feed, class Match>
double train(task& data, int steps, std::size_t batch, Program& prog, Optimizer& opt, const Schedule& schedule, Feed feed,
             Match match) {
    if (steps <= 0) return match();
    struct source {  // the trainer's view of the examples: size() and feed(program, rows, n)
        std::vector<example> all, batch;
        Feed& feed_batch;
        std::size_t size() const { return all.size(); }
        void feed(Program&, const std::size_t* rows, std::size_t n) {
            batch.clear();
            for (std::size_t k = 0; k < n; ++k) batch.push_back(all[rows[k]]);
            feed_batch(batch);
        }
    } train_set{data.sample(std::size_t(steps) * batch), {}, feed};
    ctg::trainer training(prog, opt,
                     {.batch = batch, .epochs = 1, .shuffle = false, .eval_every = 200, .higher_is_better = true,
                      .metric_name = "exact_match"},
                     schedule);
    const ctg::train_report r = training.fit(train_set, data.test, [&](auto&, auto&, std::size_t) { return match(); });
    std::printf("exact match on %zu held-out dates (greedy): %.1f%%, trained in %.0f s, %zu parameters\n",
                data.test.size(), 100 * r.metric, r.seconds, prog.params().num_elements());
    return r.metric;
}

}  // namespace dates
