// The per-shape GEMM profile (kernels/gemm_profile.hpp), compiled in for this test only.
#define CTG_GEMM_PROFILE 1
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include <ctgraph/kernels/gemm.hpp>

using namespace ctg;

TEST_CASE("the GEMM profile counts every call by shape and prints the table", "[kernels]") {
    auto& table = kernels::profile::gemm_table::instance();
    table.clear();
    std::vector<float> A(256 * 128, 0.5f), B(128 * 64, 0.25f), C(256 * 64);
    for (int i = 0; i < 3; ++i) kernels::gemm(false, false, 256, 64, 128, 1.0f, A.data(), 128, B.data(), 64, 0.0f, C.data(), 64);
    kernels::gemm(true, false, 128, 64, 256, 1.0f, A.data(), 128, C.data(), 64, 0.0f, B.data(), 64);
    const auto rows = table.snapshot();
    REQUIRE(rows.size() == 2);
    const kernels::profile::gemm_shape nn{kernels::use_register_gemm<float>(false, false, 256, 64, 128), false, false, 256, 64, 128};
    REQUIRE(rows.count(nn) == 1);
    CHECK(rows.at(nn).calls == 3);
    CHECK(rows.at(nn).seconds > 0);
    CHECK(C[0] == Approx(128 * 0.5f * 0.25f));

    std::FILE* f = std::tmpfile();
    REQUIRE(f);
    table.print(f);
    std::rewind(f);
    std::string text(4096, '\0');
    text.resize(std::fread(text.data(), 1, text.size(), f));
    std::fclose(f);
    CHECK(text.find("NN    256     64    128  calls        3") != std::string::npos);
    CHECK(text.find("TN    128     64    256  calls        1") != std::string::npos);
    table.clear();  // nothing printed at exit
}
