// NVML sampling for `swapffn bench`. NVML ships with the driver (libnvidia-ml.so.1), not with the
// toolkit, so it is opened at run time: building needs only nvml.h (pip package nvidia-nvml-dev),
// and a binary carried to a GPU machine uses that machine's driver library.
#include "cuda/nvml_telemetry.hpp"

#include <dlfcn.h>
#include <nvml.h>

#include <atomic>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "cuda/cuda_check.hpp"

namespace swapffn::cuda {

namespace {

// The NVML entry points the sampler uses, resolved once per process; nvmlInit_v2 called once.
struct Nvml {
  std::string error;  // why NVML cannot be used (empty: usable)
  decltype(&nvmlInit_v2) init = nullptr;
  decltype(&nvmlErrorString) error_string = nullptr;
  decltype(&nvmlDeviceGetHandleByPciBusId_v2) handle_by_pci = nullptr;
  decltype(&nvmlDeviceGetClockInfo) clock_info = nullptr;
  decltype(&nvmlDeviceGetCurrentClocksEventReasons) clock_reasons = nullptr;
  decltype(&nvmlDeviceGetTotalEnergyConsumption) energy = nullptr;
  // Deprecated in the 13.x header in favour of a versioned struct, but what every driver has.
  nvmlReturn_t (*temperature)(nvmlDevice_t, nvmlTemperatureSensors_t, unsigned int*) = nullptr;

  Nvml() {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char* e = dlerror();
      error = std::string("cannot open the driver's NVML library libnvidia-ml.so.1: ") + (e ? e : "unknown error");
      return;
    }
    const auto need = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (!fn && error.empty()) error = std::string("the driver's NVML library has no ") + name;
    };
    need(init, "nvmlInit_v2");
    need(error_string, "nvmlErrorString");
    need(handle_by_pci, "nvmlDeviceGetHandleByPciBusId_v2");
    need(clock_info, "nvmlDeviceGetClockInfo");
    need(clock_reasons, "nvmlDeviceGetCurrentClocksEventReasons");
    need(energy, "nvmlDeviceGetTotalEnergyConsumption");
    need(temperature, "nvmlDeviceGetTemperature");
    if (!error.empty()) return;
    if (const nvmlReturn_t r = init(); r != NVML_SUCCESS) error = std::string("nvmlInit_v2 failed: ") + error_string(r);
  }
  // The library stays loaded and initialised until the process ends (NVML's own advice for tools).

  static const Nvml& get() {
    static const Nvml nvml;
    return nvml;
  }
  std::string what(const char* call, nvmlReturn_t r) const { return std::string(call) + " failed: " + error_string(r); }
};

unsigned to_clock_limits(unsigned long long reasons) {
  unsigned l = 0;
  if (reasons & nvmlClocksEventReasonSwPowerCap) l |= kClockLimitPower;
  if (reasons & (nvmlClocksEventReasonSwThermalSlowdown | nvmlClocksThrottleReasonHwThermalSlowdown))
    l |= kClockLimitThermal;
  if (reasons & (nvmlClocksThrottleReasonHwSlowdown | nvmlClocksThrottleReasonHwPowerBrakeSlowdown))
    l |= kClockLimitHardware;
  if (reasons & nvmlClocksEventReasonGpuIdle) l |= kClockLimitIdle;
  if (reasons & (nvmlClocksEventReasonApplicationsClocksSetting | nvmlClocksEventReasonSyncBoost |
                 nvmlClocksEventReasonDisplayClockSetting | nvmlClocksEventReasonBoardLimit |
                 nvmlClocksEventReasonReliability))
    l |= kClockLimitOther;
  return l;
}

}  // namespace

struct NvmlSampler::Impl {
  const Nvml& nvml = Nvml::get();
  nvmlDevice_t device{};
  std::chrono::microseconds period{};
  bool energy_counter = false;

  std::thread thread;
  std::atomic<bool> running{false};
  std::vector<TelemetrySample> samples;  // written by the thread while running, read after join
  std::string thread_error;              // the first failed reading of the window
  std::chrono::steady_clock::time_point t0;
  unsigned long long energy0_mj = 0;

  // Empty string on success; else what failed (the sampler thread cannot throw).
  std::string read(TelemetrySample& s) const {
    unsigned clock = 0, temp = 0;
    unsigned long long reasons = 0;
    if (const nvmlReturn_t r = nvml.clock_info(device, NVML_CLOCK_SM, &clock); r != NVML_SUCCESS)
      return nvml.what("nvmlDeviceGetClockInfo(SM)", r);
    if (const nvmlReturn_t r = nvml.temperature(device, NVML_TEMPERATURE_GPU, &temp); r != NVML_SUCCESS)
      return nvml.what("nvmlDeviceGetTemperature(GPU)", r);
    if (const nvmlReturn_t r = nvml.clock_reasons(device, &reasons); r != NVML_SUCCESS)
      return nvml.what("nvmlDeviceGetCurrentClocksEventReasons", r);
    s = {double(clock), double(temp), to_clock_limits(reasons)};
    return {};
  }
  unsigned long long energy_mj() const {
    unsigned long long e = 0;
    if (const nvmlReturn_t r = nvml.energy(device, &e); r != NVML_SUCCESS)
      SWAPFFN_FAIL(nvml.what("nvmlDeviceGetTotalEnergyConsumption", r));
    return e;
  }
  void join() {
    running = false;
    if (thread.joinable()) thread.join();
  }
};

NvmlSampler::NvmlSampler(std::chrono::microseconds period) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  SWAPFFN_REQUIRE(m.nvml.error.empty(), "GPU telemetry: " + m.nvml.error);
  SWAPFFN_REQUIRE(period.count() > 0, "GPU telemetry: the sampling period must be positive");
  m.period = period;
  int cuda_device = 0;
  CUDA_CHECK(cudaGetDevice(&cuda_device));
  char bus_id[32] = {};
  CUDA_CHECK(cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), cuda_device));
  if (const nvmlReturn_t r = m.nvml.handle_by_pci(bus_id, &m.device); r != NVML_SUCCESS)
    SWAPFFN_FAIL("GPU telemetry: no NVML device at PCI bus id " + std::string(bus_id) + " (CUDA device " +
                 std::to_string(cuda_device) + "): " + m.nvml.what("nvmlDeviceGetHandleByPciBusId_v2", r));
  TelemetrySample probe;
  const std::string e = m.read(probe);
  SWAPFFN_REQUIRE(e.empty(), "GPU telemetry: " + e);
  unsigned long long energy = 0;
  const nvmlReturn_t r = m.nvml.energy(m.device, &energy);
  SWAPFFN_REQUIRE(r == NVML_SUCCESS || r == NVML_ERROR_NOT_SUPPORTED,
                  "GPU telemetry: " + m.nvml.what("nvmlDeviceGetTotalEnergyConsumption", r));
  m.energy_counter = r == NVML_SUCCESS;
}

NvmlSampler::~NvmlSampler() { impl_->join(); }

bool NvmlSampler::has_energy_counter() const { return impl_->energy_counter; }

TelemetrySample NvmlSampler::sample() const {
  TelemetrySample s;
  const std::string e = impl_->read(s);
  SWAPFFN_REQUIRE(e.empty(), "GPU telemetry: " + e);
  return s;
}

void NvmlSampler::start() {
  Impl& m = *impl_;
  SWAPFFN_REQUIRE(!m.running, "GPU telemetry: start() while a window is open");
  m.samples.clear();
  m.thread_error.clear();
  m.energy0_mj = m.energy_counter ? m.energy_mj() : 0;
  m.t0 = std::chrono::steady_clock::now();
  m.running = true;
  m.thread = std::thread([&m] {
    auto next = std::chrono::steady_clock::now();
    // At least one sample, however short the window.
    do {
      TelemetrySample s;
      const std::string e = m.read(s);
      if (!e.empty()) {
        m.thread_error = e;
        return;
      }
      m.samples.push_back(s);
      next += m.period;
      std::this_thread::sleep_until(next);
    } while (m.running);
  });
}

TelemetrySummary NvmlSampler::stop() {
  Impl& m = *impl_;
  SWAPFFN_REQUIRE(m.thread.joinable(), "GPU telemetry: stop() without start()");
  m.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - m.t0).count();
  SWAPFFN_REQUIRE(m.thread_error.empty(), "GPU telemetry: a reading failed during the window: " + m.thread_error);
  const double energy_j = m.energy_counter ? 1e-3 * double(m.energy_mj() - m.energy0_mj) : -1;
  return summarize_telemetry(m.samples, seconds, energy_j);
}

}  // namespace swapffn::cuda
