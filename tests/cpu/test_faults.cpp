// Bad expert ids on the CPU backend (moekit/faults.hpp): a topk_ids value outside [0, E_global)
// or an expert_map entry outside [0, E) (neither -1) contributes nothing, like -1, and is recorded
// in the process's CPU record until take_fault / check_faults reads and clears it; the debug mode
// (Options::debug_faults, MOEKIT_DEBUG_FAULTS) throws before anything is computed.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/moe_case.hpp"
#include "common/scoped_env.hpp"
#include "moekit/moekit.hpp"

namespace moekit::testing {
namespace {

using i64 = std::int64_t;

Options cpu_options() {
  Options o;
  o.backend = Backend::kCpu;
  return o;
}

// Empties the CPU record so that a test sees only its own faults (other tests leave theirs).
void clear_cpu_faults() { take_fault(nullptr, cpu_options()); }

std::vector<std::uint16_t> run(const MoeCase& c, Options o = cpu_options()) {
  std::vector<std::uint16_t> out(static_cast<std::size_t>(c.spec.M * c.spec.K), 0x7fc0);
  fused_experts(c.host_args(out.data()), o);
  return out;
}

CaseSpec spec(bool expert_map) {
  CaseSpec s;
  s.M = 5;
  s.E = 8;
  s.k = 2;
  s.K = 128;
  s.N = 64;
  s.expert_map = expert_map;  // E_global = 16: odd ids remote, even ones local
  s.seed = 4242;
  return s;
}

TEST(CpuFaults, GoodCallsLeaveNoFault) {
  clear_cpu_faults();
  for (bool map : {false, true}) {
    MoeCase c = make_case(spec(map));
    c.topk_ids[1] = -1;  // a masked slot is not a fault
    run(c);
  }
  Fault f;
  EXPECT_FALSE(take_fault(&f, cpu_options()));
  EXPECT_EQ(f.tensor, FaultTensor::kNone);
  EXPECT_NO_THROW(check_faults(cpu_options()));
}

TEST(CpuFaults, BadTopkIdIsRecordedAndContributesNothing) {
  clear_cpu_faults();
  MoeCase c = make_case(spec(false));
  c.topk_ids[2 * 2 + 1] = -1;
  const auto masked = run(c);
  EXPECT_FALSE(take_fault(nullptr, cpu_options()));
  for (std::int32_t bad : {8, 1000, -5}) {
    c.topk_ids[2 * 2 + 1] = bad;
    EXPECT_EQ(run(c), masked) << bad;
    Fault f;
    ASSERT_TRUE(take_fault(&f, cpu_options())) << bad;
    EXPECT_EQ(f.tensor, FaultTensor::kTopkIds);
    EXPECT_EQ(f.row, 2);
    EXPECT_EQ(f.slot, 1);
    EXPECT_EQ(f.value, bad);
    EXPECT_EQ(f.bound, 8);
    // Read and cleared: a second read finds nothing.
    EXPECT_FALSE(take_fault(&f, cpu_options()));
  }
}

TEST(CpuFaults, BadExpertMapEntryIsRecorded) {
  clear_cpu_faults();
  MoeCase c = make_case(spec(true));
  const std::int32_t id = c.topk_ids[3 * 2 + 0];  // token 3, slot 0
  c.expert_map[static_cast<std::size_t>(id)] = -1;
  const auto remote = run(c);
  // Other slots may use the same id: the first in slot order is the one recorded on the CPU.
  i64 first = 0;
  while (c.topk_ids[static_cast<std::size_t>(first)] != id) ++first;
  for (std::int32_t bad : {8, 77, -2}) {
    c.expert_map[static_cast<std::size_t>(id)] = bad;
    EXPECT_EQ(run(c), remote) << bad;
    Fault f;
    ASSERT_TRUE(take_fault(&f, cpu_options())) << bad;
    EXPECT_EQ(f.tensor, FaultTensor::kExpertMap);
    EXPECT_EQ(f.row, first / 2);
    EXPECT_EQ(f.slot, first % 2);
    EXPECT_EQ(f.value, bad);
    EXPECT_EQ(f.expert, id);
    EXPECT_EQ(f.bound, 8);
  }
}

TEST(CpuFaults, FirstFaultIsKeptUntilChecked) {
  clear_cpu_faults();
  MoeCase c = make_case(spec(false));
  c.topk_ids[1 * 2 + 0] = 50;
  c.topk_ids[4 * 2 + 1] = 60;
  run(c);
  c.topk_ids[1 * 2 + 0] = 0;
  run(c);  // a later call's fault does not replace the unchecked one
  Fault f;
  ASSERT_TRUE(take_fault(&f, cpu_options()));
  EXPECT_EQ(f.row, 1);
  EXPECT_EQ(f.slot, 0);
  EXPECT_EQ(f.value, 50);
}

TEST(CpuFaults, CheckFaultsThrowsInvalidArgumentNamingTheId) {
  clear_cpu_faults();
  MoeCase c = make_case(spec(false));
  c.topk_ids[3 * 2 + 1] = 99;
  run(c);
  try {
    check_faults(cpu_options());
    FAIL() << "check_faults did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kInvalidArgument);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("topk_ids[3, 1] = 99"), std::string::npos) << msg;
    EXPECT_NE(msg.find("row 3, slot 1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("E_global=8"), std::string::npos) << msg;
  }
  EXPECT_NO_THROW(check_faults(cpu_options()));  // cleared by the first check
  // Backend::kAuto (the default) reads the CPU record too.
  run(c);
  EXPECT_THROW(check_faults(), Error);
  run(c);
  EXPECT_THROW(check_faults(static_cast<void*>(nullptr)), Error);
}

TEST(CpuFaults, DebugModeThrowsBeforeComputing) {
  clear_cpu_faults();
  MoeCase c = make_case(spec(true));
  const std::int32_t id = c.topk_ids[0];
  c.expert_map[static_cast<std::size_t>(id)] = 12;
  Options o = cpu_options();
  o.debug_faults = true;
  std::vector<std::uint16_t> out(static_cast<std::size_t>(c.spec.M * c.spec.K), 0x7fc0);
  try {
    fused_experts(c.host_args(out.data()), o);
    FAIL() << "the debug mode did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kInvalidArgument);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("expert_map[" + std::to_string(id) + "] = 12"), std::string::npos) << msg;
    EXPECT_NE(msg.find("row 0, slot 0"), std::string::npos) << msg;
  }
  for (std::uint16_t v : out) ASSERT_EQ(v, 0x7fc0) << "out was written before the throw";
  EXPECT_FALSE(take_fault(nullptr, cpu_options())) << "a thrown fault is not recorded as well";

  // The environment variable turns it on for every call; "0" and "" leave it off.
  {
    ScopedEnv env("MOEKIT_DEBUG_FAULTS", "1");
    EXPECT_TRUE(debug_faults_enabled());
    EXPECT_THROW(run(c), Error);
  }
  for (const char* off : {"0", ""}) {
    ScopedEnv env("MOEKIT_DEBUG_FAULTS", off);
    EXPECT_FALSE(debug_faults_enabled());
    EXPECT_NO_THROW(run(c));
    EXPECT_TRUE(take_fault(nullptr, cpu_options()));
  }
  // Good calls pass in the debug mode.
  c.expert_map[static_cast<std::size_t>(id)] = -1;
  EXPECT_NO_THROW(run(c, o));
}

TEST(CpuFaults, FusedMoeRoutesValidIds) {
  clear_cpu_faults();
  MoeCase c = make_case(spec(true));
  std::vector<std::uint16_t> out(static_cast<std::size_t>(c.spec.M * c.spec.K), 0x7fc0);
  FusedMoeArgs a;
  a.experts = c.host_args(out.data());
  a.experts.topk_ids = TensorView{};
  a.experts.topk_weights = TensorView{};
  a.router_logits = TensorView::contiguous(c.router_logits.data(), DType::kFp32, {c.spec.M, c.E_global});
  a.routing = c.spec.routing;
  a.routing.top_k = static_cast<int>(c.spec.k);
  Options o = cpu_options();
  o.debug_faults = true;
  EXPECT_NO_THROW(fused_moe(a, o));
  // A bad expert_map entry for a routed id is a fault here too.
  for (auto& e : c.expert_map) e = e < 0 ? -1 : e + 100;
  EXPECT_THROW(fused_moe(a, o), Error);
}

TEST(CpuFaults, EpDispatchRecordsBadIds) {
  clear_cpu_faults();
  const i64 M = 2, k = 2, K = 8, ep = 2, C = M * k;
  std::vector<std::int32_t> ids = {0, -1, 3, 7};  // E_global = 4: 7 is bad, -1 is masked
  const std::vector<float> w = {1.f, 1.f, 1.f, 1.f};
  std::vector<std::uint16_t> hidden(M * K, 0x3f80), send(ep * C * K, 0);
  std::vector<std::int32_t> route(M * k), counts(ep), meta(ep * C * 2, 0);
  EpDispatchArgs a;
  a.hidden = TensorView::contiguous(hidden.data(), DType::kBf16, {M, K});
  a.topk_ids = TensorView::contiguous(ids.data(), DType::kInt32, {M, k});
  a.topk_weights = TensorView::contiguous(w.data(), DType::kFp32, {M, k});
  a.num_experts_global = 4;
  a.ep_size = static_cast<int>(ep);
  a.slot_route = TensorView::contiguous(route.data(), DType::kInt32, {M * k});
  a.send_counts = TensorView::contiguous(counts.data(), DType::kInt32, {ep});
  a.send_hidden = TensorView::contiguous(send.data(), DType::kBf16, {ep, C, K});
  a.send_meta = TensorView::contiguous(meta.data(), DType::kInt32, {ep, C, 2});
  ep_dispatch(a, cpu_options());
  EXPECT_EQ(route[3], -1);
  Fault f;
  ASSERT_TRUE(take_fault(&f, cpu_options()));
  EXPECT_EQ(f.tensor, FaultTensor::kTopkIds);
  EXPECT_EQ(f.row, 1);
  EXPECT_EQ(f.slot, 1);
  EXPECT_EQ(f.value, 7);
  Options dbg = cpu_options();
  dbg.debug_faults = true;
  EXPECT_THROW(ep_dispatch(a, dbg), Error);
  ids[3] = -1;
  EXPECT_NO_THROW(ep_dispatch(a, dbg));
  EXPECT_FALSE(take_fault(&f, cpu_options()));
}

TEST(CpuFaults, FaultToStringAndNames) {
  EXPECT_STREQ(fault_tensor_name(FaultTensor::kTopkIds), "topk_ids");
  EXPECT_STREQ(fault_tensor_name(FaultTensor::kExpertMap), "expert_map");
  EXPECT_STREQ(fault_tensor_name(FaultTensor::kNone), "none");
  Fault f;
  EXPECT_EQ(f.to_string(), "no fault");
  f.tensor = FaultTensor::kTopkIds;
  f.row = 3;
  f.slot = 1;
  f.value = 130;
  f.bound = 128;
  EXPECT_EQ(f.to_string(), "topk_ids[3, 1] = 130 (row 3, slot 1) is outside [0, E_global=128) and not -1");
  f.tensor = FaultTensor::kExpertMap;
  f.expert = 17;
  f.value = 40;
  f.bound = 32;
  EXPECT_EQ(f.to_string(),
            "expert_map[17] = 40 (for topk_ids[3, 1] = 17: row 3, slot 1) is outside [0, E=32) and not -1");
}

}  // namespace
}  // namespace moekit::testing
