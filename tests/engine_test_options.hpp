// Short builders for EngineOptions / StepOptions in tests (designated initialisers of these structs
// trip -Wmissing-field-initializers).
#pragma once
#include "swapffn/backends.hpp"

namespace swapffn::testing {

inline EngineOptions threads(int n) {
  EngineOptions o;
  o.threads = n;
  return o;
}

inline StepOptions step_opts(Trace* record, const Trace* follow = nullptr, FollowReport* report = nullptr) {
  StepOptions o;
  o.record = record;
  o.follow = follow;
  o.report = report;
  return o;
}

}  // namespace swapffn::testing
