// Standalone smoke test for examples/plot_png.hpp: writes a gradient-flow style chart (three
// series on a log y axis) to argv[1] and a heat map beside it, and checks that bad input is
// rejected. Exit 0 on success.
// The PNG itself is meant to be inspected (or parsed by a script); this only checks it was written.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>

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
        expect(std::filesystem::file_size(hpath) > 7 * 4 * 28 * 28 * 3, "heat map written, cells included");
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
