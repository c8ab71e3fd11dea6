// NVML sampling for `swapffn bench`. NVML ships with the driver (libnvidia-ml.so.1), not with the
// toolkit, so it is opened at run time: building needs only nvml.h (pip package nvidia-nvml-dev),
// and a binary carried to a GPU machine uses that machine's driver library.
#include "bench/nvml_telemetry.hpp"

#include <dlfcn.h>
#include <nvml.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "cuda/runtime/cuda_check.hpp"

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
  decltype(&nvmlDeviceGetFieldValues) field_values = nullptr;
  // Deprecated in the 13.x header in favour of a versioned struct, but what every driver has.
  nvmlReturn_t (*temperature)(nvmlDevice_t, nvmlTemperatureSensors_t, unsigned int*) = nullptr;

  // SWAPFFN_NVML_LIBRARY names another library file (a test uses it to take the no-NVML path).
  Nvml() {
    const char* env = std::getenv("SWAPFFN_NVML_LIBRARY");
    const std::string name = env && *env ? env : "libnvidia-ml.so.1";
    void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char* e = dlerror();
      error = "cannot open the driver's NVML library " + name + ": " + (e ? e : "unknown error");
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
    need(field_values, "nvmlDeviceGetFieldValues");
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

// A field value as a double (NVML picks the type per field and board).
double field_as_double(const nvmlFieldValue_t& f) {
  switch (f.valueType) {
    case NVML_VALUE_TYPE_DOUBLE: return f.value.dVal;
    case NVML_VALUE_TYPE_UNSIGNED_INT: return f.value.uiVal;
    case NVML_VALUE_TYPE_UNSIGNED_LONG: return static_cast<double>(f.value.ulVal);
    case NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: return static_cast<double>(f.value.ullVal);
    case NVML_VALUE_TYPE_SIGNED_LONG_LONG: return static_cast<double>(f.value.sllVal);
    case NVML_VALUE_TYPE_SIGNED_INT: return f.value.siVal;
    case NVML_VALUE_TYPE_UNSIGNED_SHORT: return f.value.usVal;
    default: return -1;
  }
}

}  // namespace

struct NvmlSampler::Impl {
  const Nvml& nvml = Nvml::get();
  nvmlDevice_t device{};
  std::chrono::microseconds period{};
  bool power = false;      // the board reads its instantaneous power
  std::string power_note;  // why not, when it does not

  std::thread thread;
  std::atomic<bool> running{false};
  std::vector<TelemetrySample> samples;  // written by the thread while running, read after join
  std::string thread_error;              // the first failed reading of the window
  std::chrono::steady_clock::time_point t0;

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
    s = {double(clock), double(temp), to_clock_limits(reasons), -1};
    if (power) {
      nvmlFieldValue_t f{};
      f.fieldId = NVML_FI_DEV_POWER_INSTANT;
      std::string e = read_power(f);
      if (!e.empty()) return e;
      s.power_w = 1e-3 * field_as_double(f);  // milliwatts
    }
    return {};
  }
  // Empty string when the instantaneous power was read into f.
  std::string read_power(nvmlFieldValue_t& f) const {
    if (const nvmlReturn_t r = nvml.field_values(device, 1, &f); r != NVML_SUCCESS)
      return nvml.what("nvmlDeviceGetFieldValues(POWER_INSTANT)", r);
    if (f.nvmlReturn != NVML_SUCCESS) return nvml.what("nvmlDeviceGetFieldValues(POWER_INSTANT) field", f.nvmlReturn);
    if (field_as_double(f) < 0) return "nvmlDeviceGetFieldValues(POWER_INSTANT): unknown value type";
    return {};
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
  // A board without a power reading still gives its clock: power is then left out, with the reason.
  nvmlFieldValue_t f{};
  f.fieldId = NVML_FI_DEV_POWER_INSTANT;
  m.power_note = m.read_power(f);
  m.power = m.power_note.empty();
  TelemetrySample probe;
  const std::string e = m.read(probe);
  SWAPFFN_REQUIRE(e.empty(), "GPU telemetry: " + e);
}

NvmlSampler::~NvmlSampler() { impl_->join(); }

bool NvmlSampler::has_power() const { return impl_->power; }

const std::string& NvmlSampler::why_no_power() const { return impl_->power_note; }

TelemetrySample NvmlSampler::sample() const {
  TelemetrySample s;
  const std::string e = impl_->read(s);
  SWAPFFN_REQUIRE(e.empty(), "GPU telemetry: " + e);
  return s;
}

void NvmlSampler::start() {
  Impl& m = *impl_;
  // A window whose thread ended on a failed reading stays open until stop() reports it.
  SWAPFFN_REQUIRE(!m.thread.joinable(), "GPU telemetry: start() while a window is open");
  m.samples.clear();
  m.thread_error.clear();
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
  return summarize_telemetry(m.samples, seconds);
}

}  // namespace swapffn::cuda
