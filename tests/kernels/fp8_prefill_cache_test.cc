// The CUDA FP8 prefill entries' on-disk check cache (kernels/fp8_prefill_cache.h), on the CPU:
// a second start with the same key checks nothing and gets back every field it stored, every input
// of the key (build, device, GPU, library versions, rows, repetitions, shape sizes and scale kind)
// names another file, errors and untimed passes are not kept, a corrupt or foreign file is ignored.
#include "kernels/fp8_prefill_cache.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

namespace spindle::kernels {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("spindle_fp8_prefill_cache_" + std::to_string(::getpid()));
  TempDir() { fs::remove_all(path); }
  ~TempDir() { fs::remove_all(path); }
};

const char kLibraries[] = "cublaslt=130100;cublas=130100;cudart=13000;driver=13000";

std::string key(std::string_view build = "build-1", std::string_view device = "cpu-x-NVIDIA H100-sm90",
                std::string_view gpu = "NVIDIA H100 80GB HBM3 sm90", std::string_view libraries = kLibraries,
                int64_t rows = 512, int reps = 5) {
  return Fp8PrefillCache::make_key(build, device, gpu, libraries, rows, reps);
}

Fp8PrefillOutcome passed(double seconds) {
  Fp8PrefillOutcome o;
  o.passed = true;
  o.max_error = 1.7e-4;
  o.tolerance = 0x1p-4 + 0x1p-10 + 0x1p-9;
  o.seconds = seconds;
  return o;
}

TEST(Fp8PrefillCache, SecondStartChecksNothingAndReadsBackEveryField) {
  TempDir dir;
  const std::string shape = "28672x4096:block128";
  Fp8PrefillOutcome failed;  // a verdict too: outside its tolerance
  failed.max_error = 0.25;
  failed.tolerance = 1e-4;
  Fp8PrefillOutcome unavailable;
  unavailable.unsupported_reasons = {"cuBLASLt 12.8 is older than 12.9", "compute capability 8.9 is not 9.0"};
  const std::map<std::string, Fp8PrefillOutcome> truth = {
      {"fp8_w8a16", passed(3.25e-4)}, {"cublaslt_fp8", failed}, {"cublaslt_fp8_fast_accum", unavailable}};
  int num_checked = 0;
  const Fp8PrefillCheckFn inner = [&](const std::string& kernel, const std::string& s) {
    EXPECT_EQ(s, shape);
    ++num_checked;
    return truth.at(kernel);
  };
  {
    Fp8PrefillCache first(dir.path, key());
    const Fp8PrefillCheckFn check = first.wrap(inner);
    for (const auto& [kernel, want] : truth) EXPECT_EQ(check(kernel, shape), want) << kernel;
    EXPECT_EQ(num_checked, 3);
    EXPECT_EQ(first.num_misses(), 3);
    EXPECT_TRUE(fs::exists(first.path_for(shape)));
  }
  Fp8PrefillCache second(dir.path, key());  // a new process: same key, same file
  const Fp8PrefillCheckFn check = second.wrap(inner);
  for (const auto& [kernel, want] : truth) EXPECT_EQ(check(kernel, shape), want) << kernel;
  EXPECT_EQ(num_checked, 3) << "the second start checked again";
  EXPECT_EQ(second.num_hits(), 3);
  EXPECT_EQ(second.num_misses(), 0);
  // Another shape of the same model is checked (and gets its own file).
  EXPECT_EQ(second.wrap([&](const std::string&, const std::string&) {
    ++num_checked;
    return passed(1e-3);
  })("fp8_w8a16", "4096x14336:block128"), passed(1e-3));
  EXPECT_EQ(num_checked, 4);
  EXPECT_NE(second.path_for("4096x14336:block128"), second.path_for(shape));
}

TEST(Fp8PrefillCache, ErrorsAndUntimedPassesAreCheckedAgain) {
  TempDir dir;
  Fp8PrefillOutcome error;
  error.error = "CUDA error: out of memory";
  int num_checked = 0;
  Fp8PrefillOutcome answer = error;
  const Fp8PrefillCheckFn inner = [&](const std::string&, const std::string&) {
    ++num_checked;
    return answer;
  };
  for (const Fp8PrefillOutcome& o : {error, passed(0.0)}) {
    answer = o;
    num_checked = 0;
    for (int start = 0; start < 2; ++start) {
      Fp8PrefillCache cache(dir.path, key());
      EXPECT_EQ(cache.wrap(inner)("cublaslt_fp8", "4096x4096:channel"), o);
    }
    EXPECT_EQ(num_checked, 2) << (o.error.empty() ? "an untimed pass" : "an error") << " was cached";
    EXPECT_FALSE(Fp8PrefillCache::cacheable(o));
  }
  EXPECT_FALSE(fs::exists(Fp8PrefillCache(dir.path, key()).path_for("4096x4096:channel")));
}

TEST(Fp8PrefillCache, EveryInputOfTheKeyNamesAnotherFile) {
  const std::string shape = "6144x4096:channel";
  const fs::path dir = "/cache";
  const fs::path base = Fp8PrefillCache(dir, key()).path_for(shape);
  const std::vector<std::pair<std::string, fs::path>> others = {
      {"build", Fp8PrefillCache(dir, key("build-2")).path_for(shape)},
      {"device fingerprint", Fp8PrefillCache(dir, key("build-1", "cpu-y-NVIDIA H100-sm90")).path_for(shape)},
      {"gpu", Fp8PrefillCache(dir, key("build-1", "cpu-x-NVIDIA H100-sm90", "NVIDIA H200 sm90")).path_for(shape)},
      {"cublaslt version",
       Fp8PrefillCache(dir, key("build-1", "cpu-x-NVIDIA H100-sm90", "NVIDIA H100 80GB HBM3 sm90",
                                "cublaslt=120900;cublas=130100;cudart=13000;driver=13000"))
           .path_for(shape)},
      {"rows", Fp8PrefillCache(dir, key("build-1", "cpu-x-NVIDIA H100-sm90", "NVIDIA H100 80GB HBM3 sm90", kLibraries,
                                        1024))
                   .path_for(shape)},
      {"reps", Fp8PrefillCache(dir, key("build-1", "cpu-x-NVIDIA H100-sm90", "NVIDIA H100 80GB HBM3 sm90", kLibraries,
                                        512, 3))
                   .path_for(shape)},
      {"out features", Fp8PrefillCache(dir, key()).path_for("4096x4096:channel")},
      {"in features", Fp8PrefillCache(dir, key()).path_for("6144x14336:channel")},
      {"scale kind (tensor)", Fp8PrefillCache(dir, key()).path_for("6144x4096:tensor")},
      {"scale kind (block128)", Fp8PrefillCache(dir, key()).path_for("6144x4096:block128")},
  };
  std::set<fs::path> seen = {base};
  for (const auto& [what, path] : others) {
    EXPECT_NE(path, base) << what;
    EXPECT_TRUE(seen.insert(path).second) << what << " collides with another input's file";
    EXPECT_EQ(path.parent_path(), dir);
  }
  EXPECT_EQ(Fp8PrefillCache(dir, key()).path_for(shape), base);  // deterministic
}

TEST(Fp8PrefillCache, CorruptOrForeignFilesAreIgnoredAndRewritten) {
  TempDir dir;
  const std::string shape = "4096x4096:tensor";
  int num_checked = 0;
  const Fp8PrefillCheckFn inner = [&](const std::string&, const std::string&) {
    ++num_checked;
    return passed(2e-4);
  };
  fs::path path;
  {
    Fp8PrefillCache cache(dir.path, key());
    path = cache.path_for(shape);
    fs::create_directories(dir.path);
    std::ofstream(path) << "{ not json";
    EXPECT_EQ(cache.wrap(inner)("cublaslt_fp8", shape), passed(2e-4));
    EXPECT_EQ(num_checked, 1);
  }
  {
    Fp8PrefillCache again(dir.path, key());  // the rewritten file answers
    EXPECT_EQ(again.wrap(inner)("cublaslt_fp8", shape), passed(2e-4));
    EXPECT_EQ(num_checked, 1);
  }
  // The same file under another key (a hash collision, or a hand-copied file) is not used.
  Fp8PrefillCache other(dir.path, key("build-2"));
  fs::copy_file(path, other.path_for(shape), fs::copy_options::overwrite_existing);
  EXPECT_FALSE(other.find(shape, "cublaslt_fp8").has_value());
}

}  // namespace
}  // namespace spindle::kernels
