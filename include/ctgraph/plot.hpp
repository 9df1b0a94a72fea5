// ctgraph/plot.hpp: line charts and heat maps written as PNG files.
//
// The examples want to show curves (training loss, gradient norms over time) without pulling in a
// plotting stack, so this draws into an RGB buffer with a built-in bitmap font and writes a PNG
// compressed by zlib (compress2, and zlib's crc32 for the chunk checksums; an 800x500 chart of a few
// lines is a few KB). The file is written atomically (binary_file::write_atomically: a temporary
// renamed over the target), so a reader never sees half a file.
//
//   ctg::plot::chart c{.title = "Gradient flow", .x_label = "k", .y_label = "|dL/dh_k|", .log_y = true};
//   c.lines.push_back({"tanh", xs, ys, {31, 119, 180}});
//   ctg::plot::write_png(c, "grad.png");
//
// and heat maps of a matrix in [0, 1] with a label per row and column (attention weights):
//
//   ctg::plot::heatmap h{.title = "attention", .row_labels = out_chars, .col_labels = in_chars, .values = w};
//   ctg::plot::write_png(h, "attention.png");
#pragma once
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include <zlib.h>

#include "ctgraph/binary_file.hpp"

/// Loss curves as PNG line charts (zlib-compressed), written without a plotting library.
namespace ctg::plot {

// Every member has a default initialiser ({}), so designated initialisers that leave some out
// compile cleanly under -Wextra.
/// One line of a chart: points (x[i], y[i]) drawn in one colour.
struct series {
    std::string label{};  ///< shown in the legend; empty: not listed
    /// @{ the points' coordinates (equal lengths)
    std::vector<double> x{}, y{};
    /// @}
    std::array<unsigned char, 3> rgb{};  ///< the line's colour
};

/// A line chart: title, axis labels, size in pixels and its lines (a legend lists the labelled ones).
struct chart {
    /// @{ the title and the axes' labels
    std::string title{}, x_label{}, y_label{};
    /// @}
    bool log_y = false;  ///< log10 scale; non-positive or non-finite y values are skipped (line broken there)
    /// @{ the image's size in pixels
    int width = 800, height = 500;
    /// @}
    std::vector<series> lines{};  ///< the lines drawn
};

/// A rows x cols matrix of values in [0, 1] (row-major), drawn white (0) to dark blue (1).
struct heatmap {
    /// @{ the title and the axes' labels
    std::string title{}, x_label{}, y_label{};
    /// @}
    /// @{ one short label per row and per column
    std::vector<std::string> row_labels{}, col_labels{};
    /// @}
    std::vector<double> values{};  ///< rows x cols values in [0, 1], row-major
    int cell = 28;  ///< pixels per cell side
};

namespace detail {

using rgb = std::array<unsigned char, 3>;

// 5x8 glyphs for ASCII 32..126, drawn by hand. One byte per row, top row in the most significant
// byte; bit 4 is the leftmost column. Rows 0-6 hold capitals and digits (baseline under row 6),
// row 7 is the descender (g j p q y , _). Example: 'A' = 0E 11 11 1F 11 11 11 00.
inline constexpr std::uint64_t glyphs[95] = {
    0x0000000000000000, 0x0404040404000400, 0x0A0A0A0000000000, 0x0A0A1F0A1F0A0A00,  //   ! " #
    0x040F140E051E0400, 0x1819020408130300, 0x0C12140815120D00, 0x0404080000000000,  // $ % & '
    0x0204080808040200, 0x0804020202040800, 0x0004150E15040000, 0x0004041F04040000,  // ( ) * +
    0x00000000000C0408, 0x0000001F00000000, 0x00000000000C0C00, 0x0001020408100000,  // , - . /
    0x0E11131519110E00, 0x040C040404040E00, 0x0E11010204081F00, 0x1F02040201110E00,  // 0 1 2 3
    0x02060A121F020200, 0x1F101E0101110E00, 0x0608101E11110E00, 0x1F01020408080800,  // 4 5 6 7
    0x0E11110E11110E00, 0x0E11110F01020C00, 0x000C0C000C0C0000, 0x000C0C000C040800,  // 8 9 : ;
    0x0204081008040200, 0x00001F001F000000, 0x0804020102040800, 0x0E11010204000400,  // < = > ?
    0x0E11171517100E00, 0x0E11111F11111100, 0x1E11111E11111E00, 0x0E11101010110E00,  // @ A B C
    0x1C12111111121C00, 0x1F10101E10101F00, 0x1F10101E10101000, 0x0E11101711110F00,  // D E F G
    0x1111111F11111100, 0x0E04040404040E00, 0x0702020202120C00, 0x1112141814121100,  // H I J K
    0x1010101010101F00, 0x111B151511111100, 0x1111191513111100, 0x0E11111111110E00,  // L M N O
    0x1E11111E10101000, 0x0E11111115120D00, 0x1E11111E14121100, 0x0F10100E01011E00,  // P Q R S
    0x1F04040404040400, 0x1111111111110E00, 0x11111111110A0400, 0x1111111515150A00,  // T U V W
    0x11110A040A111100, 0x1111110A04040400, 0x1F01020408101F00, 0x0E08080808080E00,  // X Y Z [
    0x0010080402010000, 0x0E02020202020E00, 0x040A110000000000, 0x000000000000001F,  // \ ] ^ _
    0x0804020000000000, 0x00000E010F110F00, 0x1010161911111E00, 0x00000E1010110E00,  // ` a b c
    0x01010D1311110F00, 0x00000E111F100E00, 0x0609081C08080800, 0x00000F11110F010E,  // d e f g
    0x1010161911111100, 0x04000C0404040E00, 0x020006020202120C, 0x1010121418141200,  // h i j k
    0x0C04040404040E00, 0x00001A1515151500, 0x0000161911111100, 0x00000E1111110E00,  // l m n o
    0x00001E11111E1010, 0x00000F11110F0101, 0x0000161910101000, 0x00000F100E011E00,  // p q r s
    0x08081C0808090600, 0x0000111111130D00, 0x00001111110A0400, 0x0000111115150A00,  // t u v w
    0x0000110A040A1100, 0x00001111110F010E, 0x00001F0204081F00, 0x0304040804040300,  // x y z {
    0x0404040404040400, 0x1804040204041800, 0x0000081502000000,  // | } ~
};
inline constexpr int glyph_h = 8, advance = 6;  // 5 columns of ink + 1 of spacing

inline int text_width(const std::string& s, int scale) {
    return s.empty() ? 0 : (int(s.size()) * advance - 1) * scale;
}

struct canvas {
    int w, h;
    std::vector<unsigned char> px;  // RGB, row-major, top row first (PNG order)

    canvas(int w_, int h_) : w(w_), h(h_), px(std::size_t(w_) * std::size_t(h_) * 3, 255) {}

    // Everything goes through here, so off-image drawing (long titles, clipped legends) is harmless.
    void blend(int x, int y, rgb c, double a) {
        if (x < 0 || y < 0 || x >= w || y >= h || a <= 0) return;
        a = std::min(a, 1.0);
        unsigned char* p = &px[(std::size_t(y) * std::size_t(w) + std::size_t(x)) * 3];
        for (int k = 0; k < 3; ++k) p[k] = (unsigned char)std::lround(p[k] * (1 - a) + c[k] * a);
    }
    void fill(int x0, int y0, int x1, int y1, rgb c) {  // inclusive corners
        for (int y = y0; y <= y1; ++y)
            for (int x = x0; x <= x1; ++x) blend(x, y, c, 1);
    }
    void frame(int x0, int y0, int x1, int y1, rgb c) {
        fill(x0, y0, x1, y0, c), fill(x0, y1, x1, y1, c), fill(x0, y0, x0, y1, c), fill(x1, y0, x1, y1, c);
    }
    // (x, y) is the top-left of the text box; `up` rotates it 90 degrees counter-clockwise (read
    // bottom to top, for the y-axis label), with (x, y) then the box's bottom-left.
    void text(int x, int y, const std::string& s, int scale, rgb c, bool up = false) {
        for (std::size_t i = 0; i < s.size(); ++i) {
            const int code = (unsigned char)s[i];
            const std::uint64_t g = glyphs[(code >= 32 && code <= 126 ? code : '?') - 32];
            for (int r = 0; r < glyph_h; ++r)
                for (int col = 0; col < 5; ++col) {
                    if (!((g >> (8 * (7 - r) + 4 - col)) & 1)) continue;
                    const int u = (int(i) * advance + col) * scale, v = r * scale;  // along, across
                    const int px0 = up ? x + v : x + u, py0 = up ? y - u - scale + 1 : y + v;
                    fill(px0, py0, px0 + scale - 1, py0 + scale - 1, c);
                }
        }
    }
};

// Anti-aliased thick polyline: the coverage of each pixel is how far its centre lies inside the
// stroke (distance to the nearest segment vs half the width), kept as a per-pixel maximum over
// the whole series and blended once, so joints between segments are not painted twice.
struct stroke {
    int x0, y0, x1, y1;  // clip rectangle, inclusive
    std::vector<float> cov;
    stroke(int a, int b, int c, int d)
        : x0(a), y0(b), x1(c), y1(d), cov(std::size_t(c - a + 1) * std::size_t(d - b + 1), 0.f) {}

    void segment(double ax, double ay, double bx, double by, double half) {
        const double dx = bx - ax, dy = by - ay, len2 = dx * dx + dy * dy;
        const int lo_x = std::max(x0, int(std::floor(std::min(ax, bx) - half - 1)));
        const int hi_x = std::min(x1, int(std::ceil(std::max(ax, bx) + half + 1)));
        const int lo_y = std::max(y0, int(std::floor(std::min(ay, by) - half - 1)));
        const int hi_y = std::min(y1, int(std::ceil(std::max(ay, by) + half + 1)));
        for (int y = lo_y; y <= hi_y; ++y)
            for (int x = lo_x; x <= hi_x; ++x) {
                const double px = x + 0.5 - ax, py = y + 0.5 - ay;
                const double t = len2 > 0 ? std::clamp((px * dx + py * dy) / len2, 0.0, 1.0) : 0.0;
                const double d = std::hypot(px - t * dx, py - t * dy);
                float& c = cov[std::size_t(y - y0) * std::size_t(x1 - x0 + 1) + std::size_t(x - x0)];
                c = std::max(c, float(std::clamp(half + 0.5 - d, 0.0, 1.0)));
            }
    }
    // `ink` marks data pixels so the legend can avoid them.
    void paint(canvas& cv, rgb c, std::vector<unsigned char>& ink) const {
        for (int y = y0; y <= y1; ++y)
            for (int x = x0; x <= x1; ++x)
                if (const float a = cov[std::size_t(y - y0) * std::size_t(x1 - x0 + 1) + std::size_t(x - x0)];
                    a > 0 && x >= 0 && y >= 0 && x < cv.w && y < cv.h) {  // an oversized legend may stick out
                    cv.blend(x, y, c, a);
                    ink[std::size_t(y) * std::size_t(cv.w) + std::size_t(x)] = 1;
                }
    }
};

struct tick {
    double value;  // in axis units (log10 of the data on a log axis)
    std::string label;
    bool major;
};

struct axis {
    double lo, hi;  // in axis units; the plotted range
    std::vector<tick> ticks;
};

// Linear axis: the range is the data's (tight; the plot leaves a few pixels of padding), the ticks
// are 1, 2 or 5 times a power of ten, roughly `target` intervals, labelled with just enough decimals.
inline axis linear_axis(double lo, double hi, int target) {
    if (hi - lo <= std::abs(hi) * 1e-12) {  // a constant: give it some room around the value
        const double pad = lo != 0 ? std::abs(lo) * 0.1 : 1.0;
        lo -= pad, hi += pad;
    }
    const double raw = (hi - lo) / target, mag = std::pow(10.0, std::floor(std::log10(raw)));
    const double step = raw / mag < 1.5 ? mag : raw / mag < 3.5 ? 2 * mag : raw / mag < 7.5 ? 5 * mag : 10 * mag;
    const double big = std::max(std::abs(lo), std::abs(hi));
    const int decimals = std::max(0, -int(std::floor(std::log10(step) + 1e-9)));
    const bool sci = big >= 1e7 || decimals > 6;  // fixed notation would be unreadable
    const int digits = std::max(1, int(std::ceil(std::log10(big / step))) + 1);  // for %g: keeps ticks distinct
    axis a{lo, hi, {}};
    // The count cap only matters if rounding ever made `++k` a no-op; normally there are ~target.
    for (double k = std::ceil(lo / step - 1e-9); k * step <= hi + step * 1e-9 && a.ticks.size() < 100; ++k) {
        double v = k * step;
        if (std::abs(v) < step * 1e-9) v = 0;  // never print "-0"
        char buf[48];
        if (sci) std::snprintf(buf, sizeof buf, "%.*g", digits, v);
        else std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
        std::string label = buf;  // "2.5e+09" -> "2.5e9", matching the log axis' "1e-3"
        if (const auto e = label.find('e'); e != std::string::npos) {
            std::size_t d = e + 1 + (label[e + 1] == '+' || label[e + 1] == '-');
            while (d + 1 < label.size() && label[d] == '0') label.erase(d, 1);
            if (label[e + 1] == '+') label.erase(e + 1, 1);
        }
        a.ticks.push_back({v, label, true});
    }
    return a;
}

// Log axis (in log10 units): whole decades around the data so at least two labelled powers of ten
// show; labels "1e-3"; every n-th decade beyond `max_labels`; minor ticks at 2..9 when few.
inline axis log_axis(double lo, double hi, int max_labels) {
    const double a_lo = std::floor(std::log10(lo) + 1e-9);
    double a_hi = std::ceil(std::log10(hi) - 1e-9);
    if (a_hi <= a_lo) a_hi = a_lo + 1;
    axis a{a_lo, a_hi, {}};
    const int decades = int(a_hi - a_lo), every = (decades + max_labels - 1) / max_labels;
    for (int e = int(a_lo); e <= int(a_hi); ++e) {
        if ((e - int(a_lo)) % every == 0) a.ticks.push_back({double(e), "1e" + std::to_string(e), true});
        if (decades <= 6 && e < int(a_hi))
            for (int m = 2; m <= 9; ++m) a.ticks.push_back({e + std::log10(double(m)), "", false});
    }
    return a;
}

// ---- PNG encoding ------------------------------------------------------------------------------

inline void put32(std::vector<unsigned char>& out, std::uint32_t v) {  // PNG and zlib are big-endian
    for (int s = 24; s >= 0; s -= 8) out.push_back((unsigned char)(v >> s));
}

inline void chunk(std::vector<unsigned char>& out, const char* type, const std::vector<unsigned char>& data) {
    put32(out, std::uint32_t(data.size()));
    const std::size_t start = out.size();
    out.insert(out.end(), type, type + 4);
    out.insert(out.end(), data.begin(), data.end());
    // The CRC covers type and data, not the length.
    put32(out, std::uint32_t(::crc32(0L, &out[start], uInt(out.size() - start))));
}

inline std::vector<unsigned char> encode_png(const canvas& cv) {
    // Each row: a filter byte, then the row filtered. Per row, the filter (None, Sub, Up, Average,
    // Paeth) whose output has the smallest sum of absolute values as signed bytes, the heuristic the
    // PNG specification suggests: flat areas and anti-aliased lines become runs of zeros that DEFLATE
    // packs tightly (an 8-point loss chart: 24 KB with None alone, a few KB so).
    const std::size_t row = std::size_t(cv.w) * 3;
    std::vector<unsigned char> raw(std::size_t(cv.h) * (row + 1)), trial(row);
    const auto paeth = [](int a, int b, int c) {
        const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
        return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
    };
    for (std::size_t y = 0; y < std::size_t(cv.h); ++y) {
        const unsigned char* cur = &cv.px[y * row];
        const unsigned char* up = y ? &cv.px[(y - 1) * row] : nullptr;
        unsigned char* out = &raw[y * (row + 1)];
        long best_cost = -1;
        for (unsigned char f = 0; f < 5; ++f) {
            long cost = 0;
            for (std::size_t i = 0; i < row; ++i) {
                const int a = i >= 3 ? cur[i - 3] : 0, b = up ? up[i] : 0, c = up && i >= 3 ? up[i - 3] : 0;
                const int pred = f == 0 ? 0 : f == 1 ? a : f == 2 ? b : f == 3 ? (a + b) / 2 : paeth(a, b, c);
                trial[i] = (unsigned char)(cur[i] - pred);
                cost += std::abs(int((signed char)trial[i]));
            }
            if (best_cost < 0 || cost < best_cost) {
                best_cost = cost;
                out[0] = f;
                std::copy(trial.begin(), trial.end(), out + 1);
            }
        }
    }
    // A zlib stream, as IDAT wants it (compress2 writes the zlib header and the Adler-32 trailer).
    uLongf zn = compressBound(uLong(raw.size()));
    std::vector<unsigned char> z(zn);
    if (compress2(z.data(), &zn, raw.data(), uLong(raw.size()), Z_BEST_COMPRESSION) != Z_OK)
        throw std::runtime_error("ctg::plot::write_png: zlib could not compress the image");
    z.resize(zn);

    std::vector<unsigned char> png{0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'}, ihdr;
    put32(ihdr, std::uint32_t(cv.w)), put32(ihdr, std::uint32_t(cv.h));
    ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});  // 8-bit, truecolour RGB, deflate, adaptive filtering, no interlace
    chunk(png, "IHDR", ihdr), chunk(png, "IDAT", z), chunk(png, "IEND", {});
    return png;
}

// Written next to the target and renamed over it (binary_file::atomic_file), so a reader never
// sees half a file; a failure throws ctg::io_error (a std::runtime_error) naming the path.
inline void write_atomically(const std::string& path, const std::vector<unsigned char>& bytes) {
    binary_file::write_atomically(path, bytes.data(), bytes.size(), "ctg::plot::write_png");
}

}  // namespace detail

namespace detail {
// png_bytes(chart)'s work (a template of nothing so that a program can compile it once:
// CTG_SEPARATE_COMPILATION, at the end of this file).
template <class = void>
std::vector<unsigned char> chart_png(const chart& c) {
    using detail::rgb;
    const auto bad = [](const std::string& why) { throw std::invalid_argument("ctg::plot::write_png: " + why); };
    if (c.width < 200 || c.width > 8192 || c.height < 150 || c.height > 8192)
        bad("size " + std::to_string(c.width) + "x" + std::to_string(c.height) +
            " is outside 200..8192 x 150..8192 pixels");
    // A point is plotted when x and y are finite (and y > 0 on a log axis); anything else breaks the line.
    const auto usable = [&](double x, double y) {
        return std::isfinite(x) && std::isfinite(y) && (!c.log_y || y > 0);
    };
    double x_lo = HUGE_VAL, x_hi = -HUGE_VAL, y_lo = HUGE_VAL, y_hi = -HUGE_VAL;
    for (const auto& s : c.lines) {
        if (s.x.size() != s.y.size())
            bad("series '" + s.label + "' has " + std::to_string(s.x.size()) + " x values but " +
                std::to_string(s.y.size()) + " y values");
        for (std::size_t i = 0; i < s.x.size(); ++i)
            if (usable(s.x[i], s.y[i]))
                x_lo = std::min(x_lo, s.x[i]), x_hi = std::max(x_hi, s.x[i]),
                y_lo = std::min(y_lo, s.y[i]), y_hi = std::max(y_hi, s.y[i]);
    }
    if (x_lo > x_hi)
        bad(c.log_y ? "no point with finite x and finite positive y to plot (log y axis)" : "no finite point to plot");
    if (!std::isfinite(x_hi - x_lo) || !std::isfinite(y_hi - y_lo)) bad("data range too large to plot");

    // Layout: one text scale for everything (5x8 glyphs magnified), margins sized from the text.
    // Heights are fixed first, so the y ticks can be chosen for the plot height; then the y labels'
    // width fixes the plot width, and the x ticks are coarsened until their labels do not collide.
    const int s = std::clamp(int(std::lround(std::min(c.width, c.height) / 250.0)), 1, 4);
    const int gap = 4 * s, tick_len = 3 * s, text_h = detail::glyph_h * s, pad = 4 * s;
    const int top = gap + (c.title.empty() ? 0 : text_h + 2 * gap);
    const int bottom = tick_len + gap + text_h + (c.x_label.empty() ? 0 : gap + text_h) + 2 * gap;
    const int y_room = std::max(2, (c.height - top - bottom) / (2 * text_h));  // labels that fit
    const detail::axis ay = c.log_y ? detail::log_axis(y_lo, y_hi, std::min(10, y_room))
                                    : detail::linear_axis(y_lo, y_hi, std::min(6, std::max(1, y_room - 1)));
    int y_tick_w = 0;
    for (const auto& t : ay.ticks) y_tick_w = std::max(y_tick_w, detail::text_width(t.label, s));
    const int left = gap + (c.y_label.empty() ? 0 : text_h + 2 * gap) + y_tick_w + gap + tick_len;
    detail::axis ax;
    for (int target = 6; target >= 1; --target) {
        ax = detail::linear_axis(x_lo, x_hi, target);
        int widest = 0;
        for (const auto& t : ax.ticks) widest = std::max(widest, detail::text_width(t.label, s));
        if (int(ax.ticks.size()) * (widest + 3 * gap) <= c.width - left - 3 * gap) break;
    }
    const int right = std::max(3 * gap, detail::text_width(ax.ticks.back().label, s) / 2 + gap);
    const int fx0 = left, fy0 = top, fx1 = c.width - 1 - right, fy1 = c.height - 1 - bottom;  // frame
    if (fx1 - fx0 < 40 || fy1 - fy0 < 40) bad("image too small for its labels");
    // Data map into the frame minus `pad`, so curves at the extremes do not sit on the frame.
    const auto px = [&](double v) { return fx0 + pad + (v - ax.lo) / (ax.hi - ax.lo) * (fx1 - fx0 - 2 * pad); };
    const auto py = [&](double v) { return fy1 - pad - (v - ay.lo) / (ay.hi - ay.lo) * (fy1 - fy0 - 2 * pad); };

    detail::canvas cv(c.width, c.height);
    const rgb ink_c{25, 25, 25}, frame_c{90, 90, 90}, grid_c{228, 228, 228}, minor_c{243, 243, 243};

    for (const auto& t : ay.ticks) {  // grid first: everything else draws over it
        const int y = int(std::lround(py(t.value)));
        cv.fill(fx0 + 1, y, fx1 - 1, y, t.major ? grid_c : minor_c);
    }
    for (const auto& t : ax.ticks) {
        const int x = int(std::lround(px(t.value)));
        cv.fill(x, fy0 + 1, x, fy1 - 1, grid_c);
    }

    std::vector<unsigned char> ink(std::size_t(c.width) * std::size_t(c.height), 0);
    const double half = 0.6 + 0.5 * s;  // stroke half-width: 2.2 px wide at s = 1, 2.7 at s = 2
    for (const auto& ser : c.lines) {
        detail::stroke st(fx0 + 1, fy0 + 1, fx1 - 1, fy1 - 1);
        bool have_prev = false;
        double qx = 0, qy = 0;
        for (std::size_t i = 0; i < ser.x.size(); ++i) {
            if (!usable(ser.x[i], ser.y[i])) {
                have_prev = false;
                continue;
            }
            const double x = px(ser.x[i]), y = py(c.log_y ? std::log10(ser.y[i]) : ser.y[i]);
            // A point with no plottable neighbour would be invisible as a line: give it a dot (a
            // degenerate segment) wider than the stroke.
            const bool next = i + 1 < ser.x.size() && usable(ser.x[i + 1], ser.y[i + 1]);
            if (have_prev) st.segment(qx, qy, x, y, half);
            else if (!next) st.segment(x, y, x, y, 2 * half);
            qx = x, qy = y, have_prev = true;
        }
        st.paint(cv, ser.rgb, ink);
    }

    cv.frame(fx0, fy0, fx1, fy1, frame_c);
    for (const auto& t : ay.ticks) {
        const int y = int(std::lround(py(t.value))), len = t.major ? tick_len : tick_len / 2 + 1;
        cv.fill(fx0 - len, y, fx0 - 1, y + (s > 1 && t.major ? 1 : 0), frame_c);
        if (!t.label.empty())
            cv.text(fx0 - tick_len - gap - detail::text_width(t.label, s), y - (7 * s) / 2, t.label, s, ink_c);
    }
    for (const auto& t : ax.ticks) {
        const int x = int(std::lround(px(t.value)));
        cv.fill(x, fy1 + 1, x + (s > 1 ? 1 : 0), fy1 + tick_len, frame_c);
        cv.text(x - detail::text_width(t.label, s) / 2, fy1 + tick_len + gap, t.label, s, ink_c);
    }
    const int plot_cx = (fx0 + fx1) / 2, plot_cy = (fy0 + fy1) / 2;
    cv.text(plot_cx - detail::text_width(c.title, s) / 2, gap, c.title, s, ink_c);
    cv.text(plot_cx - detail::text_width(c.x_label, s) / 2, fy1 + tick_len + 2 * gap + text_h, c.x_label, s, ink_c);
    cv.text(gap, plot_cy + detail::text_width(c.y_label, s) / 2, c.y_label, s, ink_c, true);

    // Legend: a boxed list in whichever inside corner covers the fewest data pixels.
    std::vector<const series*> listed;
    int label_w = 0;
    for (const auto& ser : c.lines)
        if (!ser.label.empty()) listed.push_back(&ser), label_w = std::max(label_w, detail::text_width(ser.label, s));
    if (!listed.empty()) {
        const int swatch = 12 * s, row_h = text_h + gap;
        const int lw = gap + swatch + gap + label_w + gap, lh = int(listed.size()) * row_h + gap;
        const int m = 2 * gap;
        const std::array<std::array<int, 2>, 4> corners{{{fx1 - m - lw, fy0 + m},  // top right first
                                                         {fx0 + m, fy0 + m},
                                                         {fx1 - m - lw, fy1 - m - lh},
                                                         {fx0 + m, fy1 - m - lh}}};
        std::size_t best_hits = SIZE_MAX;
        int lx = corners[0][0], ly = corners[0][1];
        for (const auto& [cx, cy] : corners) {
            std::size_t hits = 0;
            for (int y = std::max(cy, 0); y < std::min(cy + lh, c.height); ++y)
                for (int x = std::max(cx, 0); x < std::min(cx + lw, c.width); ++x)
                    hits += ink[std::size_t(y) * std::size_t(c.width) + std::size_t(x)];
            if (hits < best_hits) best_hits = hits, lx = cx, ly = cy;
        }
        cv.fill(lx, ly, lx + lw - 1, ly + lh - 1, rgb{255, 255, 255});
        cv.frame(lx, ly, lx + lw - 1, ly + lh - 1, rgb{170, 170, 170});
        for (std::size_t i = 0; i < listed.size(); ++i) {
            const int ry = ly + gap + int(i) * row_h;
            detail::stroke st(lx + gap - 2, ry, lx + gap + swatch + 2, ry + text_h);
            const double mid = ry + (7 * s) / 2.0;
            st.segment(lx + gap, mid, lx + gap + swatch, mid, half);
            st.paint(cv, listed[i]->rgb, ink);
            cv.text(lx + 2 * gap + swatch, ry, listed[i]->label, s, ink_c);
        }
    }

    return detail::encode_png(cv);
}

}  // namespace detail

/// The PNG file of the chart, in memory (write_png writes these bytes).
inline std::vector<unsigned char> png_bytes(const chart& c) { return detail::chart_png(c); }

/// Writes the chart as a PNG file, atomically; throws ctg::io_error when the file cannot be written.
inline void write_png(const chart& c, const std::string& path) { detail::write_atomically(path, png_bytes(c)); }

namespace detail {
// png_bytes(heatmap)'s work (as chart_png).
template <class = void>
std::vector<unsigned char> heatmap_png(const heatmap& h) {
    using detail::rgb;
    const auto bad = [](const std::string& why) { throw std::invalid_argument("ctg::plot::write_png (heatmap): " + why); };
    const std::size_t rows = h.row_labels.size(), cols = h.col_labels.size();
    if (rows == 0 || cols == 0) bad("give one label per row and per column (got none)");
    if (h.values.size() != rows * cols)
        bad(std::to_string(h.values.size()) + " values for " + std::to_string(rows) + " rows x " + std::to_string(cols) +
            " columns");
    if (h.cell < 8 || h.cell > 128) bad("cell size " + std::to_string(h.cell) + " is outside 8..128 pixels");
    for (double v : h.values)
        if (!std::isfinite(v)) bad("a value is not finite");
    const int s = h.cell >= 24 ? 2 : 1, gap = 4 * s, text_h = detail::glyph_h * s;
    int row_w = 0, col_h = 0;
    for (const auto& l : h.row_labels) row_w = std::max(row_w, detail::text_width(l, s));
    for (const auto& l : h.col_labels) col_h = std::max(col_h, detail::text_width(l, s));
    const bool short_cols = col_h <= h.cell - 2;  // labels that fit a cell stand upright, others run up
    const int top = gap + (h.title.empty() ? 0 : text_h + 2 * gap) + (h.x_label.empty() ? 0 : text_h + gap) +
                    (short_cols ? text_h : col_h) + gap;
    const int left = gap + (h.y_label.empty() ? 0 : text_h + 2 * gap) + row_w + gap;
    const int title_w = std::max(detail::text_width(h.title, s), detail::text_width(h.x_label, s));
    const int width = std::max(left + int(cols) * h.cell + 2 * gap, title_w + 2 * gap);
    const int height = top + int(rows) * h.cell + 2 * gap;
    if (width > 8192 || height > 8192) bad("the image would exceed 8192 pixels a side");
    detail::canvas cv(width, height);
    const rgb ink_c{25, 25, 25};
    for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t c = 0; c < cols; ++c) {
            const double v = std::clamp(h.values[r * cols + c], 0.0, 1.0);
            const rgb col{(unsigned char)std::lround(255 - v * (255 - 8)), (unsigned char)std::lround(255 - v * (255 - 48)),
                          (unsigned char)std::lround(255 - v * (255 - 107))};
            const int x0 = left + int(c) * h.cell, y0 = top + int(r) * h.cell;
            cv.fill(x0, y0, x0 + h.cell - 1, y0 + h.cell - 1, col);
        }
    cv.frame(left - 1, top - 1, left + int(cols) * h.cell, top + int(rows) * h.cell, rgb{90, 90, 90});
    for (std::size_t r = 0; r < rows; ++r)
        cv.text(left - gap - detail::text_width(h.row_labels[r], s), top + int(r) * h.cell + (h.cell - 7 * s) / 2,
                h.row_labels[r], s, ink_c);
    for (std::size_t c = 0; c < cols; ++c) {
        const int cx = left + int(c) * h.cell;
        if (short_cols)
            cv.text(cx + (h.cell - detail::text_width(h.col_labels[c], s)) / 2, top - gap - text_h, h.col_labels[c], s, ink_c);
        else
            cv.text(cx + (h.cell - 7 * s) / 2, top - gap, h.col_labels[c], s, ink_c, true);
    }
    // Titles centred over the grid, shifted inwards when wider than the room beside it.
    const auto centred = [&](const std::string& t) {
        const int w = detail::text_width(t, s);
        return std::clamp(left + int(cols) * h.cell / 2 - w / 2, gap, width - gap - w);
    };
    cv.text(centred(h.title), gap, h.title, s, ink_c);
    if (!h.x_label.empty())
        cv.text(centred(h.x_label), gap + (h.title.empty() ? 0 : text_h + 2 * gap), h.x_label, s, ink_c);
    if (!h.y_label.empty())
        cv.text(gap, top + int(rows) * h.cell / 2 + detail::text_width(h.y_label, s) / 2, h.y_label, s, ink_c, true);
    return detail::encode_png(cv);
}

}  // namespace detail

/// The PNG file of the heat map, in memory (write_png writes these bytes).
inline std::vector<unsigned char> png_bytes(const heatmap& h) { return detail::heatmap_png(h); }

/// Writes the heatmap as a PNG file, atomically; throws ctg::io_error when the file cannot be written.
inline void write_png(const heatmap& h, const std::string& path) { detail::write_atomically(path, png_bytes(h)); }

// Compiled once where a program defines CTG_SEPARATE_COMPILATION (see kernels/gemm.hpp): the
// charts' rendering, about 1.4 s of g++ per translation unit that writes one.
#define CTG_PLOT_INSTANCES(how)                                           \
    how std::vector<unsigned char> detail::chart_png<void>(const chart&); \
    how std::vector<unsigned char> detail::heatmap_png<void>(const heatmap&);
#if defined(CTG_SEPARATE_COMPILATION)
CTG_PLOT_INSTANCES(extern template)
#endif

}  // namespace ctg::plot
