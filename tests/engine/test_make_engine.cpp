// The engine factory and the Engine interface: the CPU engine made by make_engine describes itself
// for the CLI, refuses the CUDA-only parts of the interface, and computes what a CpuEngine made
// directly computes; Device::kCuda is refused without a usable GPU.
#include <gtest/gtest.h>

#include "flashnorm/engine/cpu_engine.h"
#include "flashnorm/engine/make_engine.h"
#include "flashnorm/error.h"
#include "support/random_llama.h"

namespace flashnorm {
namespace {

std::string model_dir() {
  static const std::string dir = [] {
    const auto d = testing::fresh_dir("make_engine");
    testing::write_random_llama(d);
    return d.string();
  }();
  return dir;
}

TEST(MakeEngine, CpuEngineThroughTheInterface) {
  EngineOptions o;
  o.device = Device::kCpu;
  o.max_context = 32;
  std::unique_ptr<Engine> e = make_engine(load_model(model_dir()), NormMode::FlashNorm, o);
  EXPECT_STREQ(e->device(), "cpu");
  EXPECT_EQ(e->describe(), "fp32, norm flashnorm");
  EXPECT_EQ(e->max_context(), 32);
  EXPECT_FALSE(e->samples_on_device());
  const int32_t ids[] = {1, 2, 3};
  EXPECT_THROW(e->generate(ids, 2, 0.0f, 0), Error);
  EXPECT_THROW(e->time_decode_steps(2), Error);
  EXPECT_THROW(e->profile_decode_step(2), Error);
  CpuEngine direct(load_model(model_dir()), NormMode::FlashNorm, {.max_context = 32});
  EXPECT_EQ(e->forward(ids), direct.forward(ids));
  o.device = Device::kAuto;
  if (!cuda_available()) {
    EXPECT_EQ(resolve_device(Device::kAuto), Device::kCpu);
    EXPECT_EQ(make_engine(load_model(model_dir()), NormMode::Standard, o)->describe(),
              "fp32, norm standard");
  }
}

// The names commands and serve's model keys give: each enumerator by name, anything else refused
// in one line naming the value and the choices.
TEST(MakeEngine, ParsesDeviceAndWeightsNames) {
  EXPECT_EQ(parse_device("auto"), Device::kAuto);
  EXPECT_EQ(parse_device("cpu"), Device::kCpu);
  EXPECT_EQ(parse_device("cuda"), Device::kCuda);
  EXPECT_EQ(parse_weights("auto"), Weights::kAuto);
  EXPECT_EQ(parse_weights("f32"), Weights::kF32);
  EXPECT_EQ(parse_weights("native"), Weights::kNative);
  EXPECT_EQ(parse_norm_mode("standard"), NormMode::Standard);
  EXPECT_EQ(parse_norm_mode("flashnorm"), NormMode::FlashNorm);
  try {
    parse_device("gpu");
    ADD_FAILURE() << "gpu accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "device 'gpu' is not one of auto, cpu, cuda");
  }
  try {
    parse_weights("q4");
    ADD_FAILURE() << "q4 accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "weights 'q4' is not one of auto, f32, native");
  }
  EXPECT_THROW(parse_norm_mode("rms"), Error);
}

TEST(MakeEngine, CudaRefusedWithoutAGpu) {
  std::string why;
  if (cuda_available(&why)) GTEST_SKIP() << "a usable GPU is present";
  EXPECT_FALSE(why.empty());
  EngineOptions o;
  o.device = Device::kCuda;
  try {
    make_engine(load_model(model_dir()), NormMode::FlashNorm, o);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--device cuda"), std::string::npos) << e.what();
  }
  EXPECT_EQ(gpu_name(), "none");
}

}  // namespace
}  // namespace flashnorm
