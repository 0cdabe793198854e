// libhvdrun next to a library that exports OpenSSL's names (TensorFlow bundles BoringSSL;
// `import tensorflow` puts it in the process's global scope before libhvdrun loads): the
// library's crypto must not be taken over. tests/runtime/crypto_interposer.c aborts on any
// call, so a job that completes shows none reached it.
#include <catch2/catch.hpp>
#include <string>

#include "tests/runtime/job_harness.h"

using namespace std::chrono_literals;
using hvdrun::test::JobSpec;
using hvdrun::test::run_job;

namespace {
const std::string kInterposer = HVDRUN_BINARY_DIR "/tests/runtime/libhvdrun_crypto_interposer.so";
const std::string kLibrary = HVDRUN_BINARY_DIR "/runtime/libhvdrun.so";
}  // namespace

TEST_CASE("libhvdrun imports no OpenSSL symbol that another library could interpose",
          "[runtime][interposition]") {
  // nm as a one-rank "job": the harness collects what it prints.
  JobSpec spec;
  spec.argv = {"/usr/bin/nm", "-D", "--undefined-only", kLibrary};
  auto r = run_job(spec);
  INFO(r.dump());
  REQUIRE(r.ok());
  const std::string& out = r.ranks.at(0).err;
  REQUIRE_THAT(out, Catch::Contains(" U malloc"));  // nm listed the imports
  for (const char* prefix : {" EVP_", " HMAC", " RAND_", " CRYPTO_", " OPENSSL_", " SHA256"})
    CHECK_THAT(out, !Catch::Contains(prefix));
}

TEST_CASE("a job works with OpenSSL's names interposed through RTLD_GLOBAL",
          "[runtime][interposition][job]") {
  auto np = GENERATE(1, 2);
  JobSpec spec;
  spec.np = np;
  spec.argv = {HVDRUN_BINARY_DIR "/tests/runtime/runtime_interposed_worker", kInterposer, kLibrary};
  spec.env = {{"HVDRUN_NCCL", "off"}};
  spec.deadline = 60s;
  auto r = run_job(spec);
  INFO("np=" << np << "\n" << r.dump());
  CHECK(r.ok());
  for (const auto& rr : r.ranks) CHECK_THAT(rr.err, Catch::Contains("interposed ok"));
}

#ifndef HVDRUN_SANITIZED_BUILD
// A sanitizer's runtime must come first in the library list, so LD_PRELOAD is left to
// the plain build; the RTLD_GLOBAL case above runs in every build.
TEST_CASE("a job works with OpenSSL's names interposed through LD_PRELOAD",
          "[runtime][interposition][job]") {
  JobSpec spec;
  spec.np = 2;
  spec.argv = {HVDRUN_BINARY_DIR "/tests/runtime/runtime_c_worker"};
  spec.env = {{"HVDRUN_NCCL", "off"}, {"LD_PRELOAD", kInterposer}};
  spec.deadline = 60s;
  auto r = run_job(spec);
  INFO(r.dump());
  CHECK(r.ok());
  for (const auto& rr : r.ranks) CHECK_THAT(rr.err, !Catch::Contains("crypto_interposer"));
}
#endif
