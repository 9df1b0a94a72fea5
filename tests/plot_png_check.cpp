// Standalone test of ctgraph/plot.hpp: writes a gradient-flow style chart (three series on a log y
// axis) to argv[1] and a heat map beside it, decodes both (signature, chunk CRCs, the zlib stream
// inflated to exactly height rows of a filter byte and RGB pixels, unfiltered), checks that a
// training-curve chart of 8 points is tens of KB (1.2 MB uncompressed), and that bad input is
// rejected. Exit 0 on success.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include <zlib.h>

#include <ctgraph/plot.hpp>

namespace {

int failures = 0;

void expect(bool ok, const char* what) {
    if (!ok) std::fprintf(stderr, "FAIL: %s\n", what), ++failures;
}

template <class E, class Figure>
bool throws(const Figure& c, const std::string& path) {
    try {
        ctg::plot::write_png(c, path);
    } catch (const E&) {
        return true;
    } catch (...) {
    }
    return false;
}

std::uint32_t be32(const unsigned char* p) {
    return std::uint32_t(p[0]) << 24 | std::uint32_t(p[1]) << 16 | std::uint32_t(p[2]) << 8 | p[3];
}

// Decodes the PNG at `path` as far as this writer's files need (8-bit RGB, no interlace):
// false (with a message) on any structural error. want_w/want_h: the size (0: any). `inked`: pixels
// that are not white.
bool valid_png(const std::string& path, int want_w, int want_h, std::size_t& inked) {
    std::ifstream in(path, std::ios::binary);
    const std::vector<unsigned char> f((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
    if (f.size() < 8 || std::memcmp(f.data(), sig, 8) != 0) return std::fprintf(stderr, "bad signature\n"), false;
    std::vector<unsigned char> idat;
    int w = 0, h = 0;
    bool end = false;
    for (std::size_t at = 8; at < f.size() && !end;) {
        if (f.size() - at < 12) return std::fprintf(stderr, "truncated chunk\n"), false;
        const std::uint32_t len = be32(&f[at]);
        if (f.size() - at - 12 < len) return std::fprintf(stderr, "chunk longer than the file\n"), false;
        const std::string type(reinterpret_cast<const char*>(&f[at + 4]), 4);
        const std::uint32_t crc = std::uint32_t(::crc32(0L, &f[at + 4], uInt(len + 4)));
        if (crc != be32(&f[at + 8 + len])) return std::fprintf(stderr, "CRC mismatch in %s\n", type.c_str()), false;
        const unsigned char* d = &f[at + 8];
        if (type == "IHDR") {
            w = int(be32(d)), h = int(be32(d + 4));
            if (d[8] != 8 || d[9] != 2 || d[12] != 0) return std::fprintf(stderr, "not 8-bit RGB\n"), false;
        } else if (type == "IDAT") {
            idat.insert(idat.end(), d, d + len);
        } else if (type == "IEND") {
            end = true;
        }
        at += 12 + len;
    }
    if (!end || (want_w && w != want_w) || (want_h && h != want_h)) return std::fprintf(stderr, "no IEND or a wrong size %dx%d\n", w, h), false;
    const std::size_t row = 1 + 3 * std::size_t(w);
    std::vector<unsigned char> raw(row * std::size_t(h) + 1);
    uLongf n = uLongf(raw.size());
    if (uncompress(raw.data(), &n, idat.data(), uLong(idat.size())) != Z_OK || n != row * std::size_t(h))
        return std::fprintf(stderr, "IDAT does not inflate to %d rows of %zu bytes\n", h, row), false;
    // Undo the filters (None, Sub, Up, Average, Paeth; 3 bytes a pixel) row by row.
    std::vector<unsigned char> px(std::size_t(h) * (row - 1)), zero(row - 1, 0);
    const auto paeth = [](int a, int b, int c) {
        const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
        return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
    };
    for (std::size_t y = 0; y < std::size_t(h); ++y) {
        const unsigned char f = raw[y * row];
        if (f > 4) return std::fprintf(stderr, "filter byte %d\n", f), false;
        unsigned char* cur = &px[y * (row - 1)];
        const unsigned char* up = y ? &px[(y - 1) * (row - 1)] : zero.data();
        for (std::size_t i = 0; i + 1 < row; ++i) {
            const int a = i >= 3 ? cur[i - 3] : 0, b = up[i], c = i >= 3 ? up[i - 3] : 0;
            const int pred = f == 0 ? 0 : f == 1 ? a : f == 2 ? b : f == 3 ? (a + b) / 2 : paeth(a, b, c);
            cur[i] = (unsigned char)(raw[y * row + 1 + i] + pred);
        }
    }
    inked = 0;
    for (std::size_t i = 0; i < px.size(); i += 3) inked += px[i] != 255 || px[i + 1] != 255 || px[i + 2] != 255;
    // Charts and heat maps are mostly white, their corners too: a row unfiltered wrongly (a filter
    // byte that is not the filter used) spreads colour over the rest of the image.
    if (px[0] != 255 || px[px.size() - 1] != 255 || inked * 2 > px.size() / 3)
        return std::fprintf(stderr, "%zu of %zu pixels are not white, or a corner is not\n", inked, px.size() / 3), false;
    return true;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s out.png\n", argv[0]);
        return 2;
    }
    const std::string path = argv[1];

    ctg::plot::chart c{.title = "Gradient flow through time",
                       .x_label = "time step k",
                       .y_label = "|dL/dh_k|",
                       .log_y = true};
    ctg::plot::series vanishing{"tanh RNN (vanishing)", {}, {}, {214, 39, 40}};
    ctg::plot::series slow{"GRU (slow decay)", {}, {}, {31, 119, 180}};
    ctg::plot::series flat{"LSTM (constant)", {}, {}, {44, 160, 44}};
    for (int k = 1; k <= 64; ++k) {
        for (auto* s : {&vanishing, &slow, &flat}) s->x.push_back(k);
        vanishing.y.push_back(std::pow(0.75, k - 1));
        slow.y.push_back(0.5 * std::pow(0.97, k - 1));
        flat.y.push_back(0.2);
    }
    vanishing.y[40] = 0.0;  // not plottable on a log axis: the line must break there, not throw
    c.lines = {vanishing, slow, flat};

    try {
        ctg::plot::write_png(c, path);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "FAIL: write_png threw: %s\n", e.what());
        return 1;
    }
    expect(std::filesystem::file_size(path) > 8, "PNG written");
    std::size_t inked = 0;
    expect(valid_png(path, 800, 500, inked), "the chart decodes as a PNG");
    expect(inked > 5000, "the chart has lines and text drawn");

    // A training-loss chart of 8 evaluations (what the trainer writes): about 21 KB (zlib at its best
    // level over adaptively filtered rows), not the 1.2 MB of uncompressed pixels.
    ctg::plot::chart loss{.title = "lm", .x_label = "step", .y_label = "loss"};
    ctg::plot::series tr{"train", {}, {}, {31, 119, 180}}, va{"val", {}, {}, {214, 39, 40}};
    for (int k = 1; k <= 8; ++k) {
        tr.x.push_back(5 * k), tr.y.push_back(2.4 / k + 0.1);
        va.x.push_back(5 * k), va.y.push_back(2.5 / std::sqrt(k));
    }
    loss.lines = {tr, va};
    const std::string lpath = path + ".loss.png";
    ctg::plot::write_png(loss, lpath);
    const auto loss_size = std::filesystem::file_size(lpath);
    std::printf("plot_png_check: an 8-point 800x500 loss chart is %ju bytes\n", std::uintmax_t(loss_size));
    expect(loss_size < 32000, "an 8-point loss chart is under 32 KB");
    expect(valid_png(lpath, 800, 500, inked) && inked > 2000, "the loss chart decodes, with ink");
    for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(lpath).parent_path()))
        expect(e.path().filename().string().find(".tmp.") == std::string::npos, "no temporary file left");

    // Input validation: each of these must throw std::invalid_argument and leave no file behind.
    const std::string scratch = path + ".invalid.png";
    auto bad = c;
    bad.lines[0].y.pop_back();
    expect(throws<std::invalid_argument>(bad, scratch), "x/y length mismatch rejected");
    bad = c;
    bad.width = 10;
    expect(throws<std::invalid_argument>(bad, scratch), "tiny width rejected");
    bad = c;
    for (auto& s : bad.lines)
        for (auto& y : s.y) y = -1;  // nothing positive on a log axis
    expect(throws<std::invalid_argument>(bad, scratch), "no plottable point rejected");
    bad.lines.clear();
    expect(throws<std::invalid_argument>(bad, scratch), "empty chart rejected");
    expect(!std::filesystem::exists(scratch), "no file written for invalid input");

    // I/O failure: a runtime_error that names the path.
    const std::string unwritable = "/nonexistent-dir/plot.png";
    try {
        ctg::plot::write_png(c, unwritable);
        expect(false, "unwritable path rejected");
    } catch (const std::runtime_error& e) {
        expect(std::string(e.what()).find(unwritable) != std::string::npos, "I/O error names the path");
    }

    // A heat map (attention weights): written, with its size following the cells; bad input rejected.
    ctg::plot::heatmap h{.title = "attention", .x_label = "input", .y_label = "output",
                         .row_labels = {"2", "0", "2", "1"}, .col_labels = {"3", " ", "M", "a", "r", "c", "h"}};
    for (std::size_t r = 0; r < 4; ++r)
        for (std::size_t col = 0; col < 7; ++col) h.values.push_back(r == col % 4 ? 0.9 : 0.02 * double(col));
    const std::string hpath = path + ".heatmap.png";
    try {
        ctg::plot::write_png(h, hpath);
        std::size_t cells = 0;  // every cell but three of column 0 is shaded
        expect(valid_png(hpath, 0, 0, cells), "the heat map decodes as a PNG");
        expect(cells > 6 * 4 * 28 * 28, "heat map written, cells included");
    } catch (const std::exception& e) {
        expect(false, e.what());
    }
    auto hbad = h;
    hbad.values.pop_back();
    expect(throws<std::invalid_argument>(hbad, scratch), "heat map with too few values rejected");
    hbad = h;
    hbad.values[3] = std::nan("");
    expect(throws<std::invalid_argument>(hbad, scratch), "heat map with a NaN rejected");
    hbad = h;
    hbad.row_labels.clear();
    expect(throws<std::invalid_argument>(hbad, scratch), "heat map without labels rejected");
    expect(!std::filesystem::exists(scratch), "no file written for an invalid heat map");

    if (failures == 0) std::printf("plot_png_check: wrote %s\n", path.c_str());
    return failures == 0 ? 0 : 1;
}
