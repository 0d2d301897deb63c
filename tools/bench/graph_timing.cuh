// The in-graph timing of moekit-bench, the rope_quant bench and moekit-launch-floor.
//
// The benches' main figure times a graph replay between two events recorded on the stream around
// cudaGraphLaunch, so it includes the graph launch: the GPU-side latency from the event to the
// graph's first kernel (an empty kernel reads 3.8-3.9 us that way on the H200). A serving engine
// captures a whole decode step (every layer's attention, router and MoE) in one graph, so a layer
// pays that launch once per step, not per call. The in-graph figure times the call as a node of
// such a graph: one graph holds [L2 flush, event A, the call, event B], the events are event-record
// nodes (cudaEventRecordExternal), and the interval is from the end of the flush to the end of the
// call's last node: the call's own launch latency inside a graph and its work, no graph launch.
// The replays go back to back, as in the outer method; each replay's two event nodes are pointed
// at fresh events first (cudaGraphExecEventRecordNodeSetEvent affects only later launches).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

namespace moekit_bench {

inline void graph_timing_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(e) + " " + cudaGetErrorString(e));
}

/// Median over `iters` back-to-back replays of [flush(), event, enqueue(), event] captured in one
/// graph on `stream`: the call's time inside a graph (above). Throws std::runtime_error if the
/// capture or a replay fails (the stream's capture is ended first).
template <class Flush, class Enqueue>
double in_graph_us(cudaStream_t stream, Flush&& flush, Enqueue&& enqueue, int iters) {
  iters = std::max(iters, 1);
  cudaEvent_t a = nullptr, b = nullptr;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  std::vector<cudaEvent_t> ev;
  auto cleanup = [&] {
    for (cudaEvent_t e : ev) cudaEventDestroy(e);
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    if (a) cudaEventDestroy(a);
    if (b) cudaEventDestroy(b);
  };
  try {
    graph_timing_check(cudaEventCreate(&a), "cudaEventCreate");
    graph_timing_check(cudaEventCreate(&b), "cudaEventCreate");
    graph_timing_check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    try {
      flush();
      graph_timing_check(cudaEventRecordWithFlags(a, stream, cudaEventRecordExternal), "cudaEventRecordWithFlags");
      enqueue();
      graph_timing_check(cudaEventRecordWithFlags(b, stream, cudaEventRecordExternal), "cudaEventRecordWithFlags");
    } catch (...) {
      cudaGraph_t g = nullptr;
      cudaStreamEndCapture(stream, &g);
      if (g) cudaGraphDestroy(g);
      throw;
    }
    graph_timing_check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
    // The two event-record nodes, found by their events.
    std::size_t n = 0;
    graph_timing_check(cudaGraphGetNodes(graph, nullptr, &n), "cudaGraphGetNodes");
    std::vector<cudaGraphNode_t> nodes(n);
    graph_timing_check(cudaGraphGetNodes(graph, nodes.data(), &n), "cudaGraphGetNodes");
    cudaGraphNode_t na = nullptr, nb = nullptr;
    for (cudaGraphNode_t node : nodes) {
      cudaGraphNodeType type{};
      graph_timing_check(cudaGraphNodeGetType(node, &type), "cudaGraphNodeGetType");
      if (type != cudaGraphNodeTypeEventRecord) continue;
      cudaEvent_t e = nullptr;
      graph_timing_check(cudaGraphEventRecordNodeGetEvent(node, &e), "cudaGraphEventRecordNodeGetEvent");
      if (e == a) na = node;
      if (e == b) nb = node;
    }
    if (!na || !nb) throw std::runtime_error("in-graph timing: the captured graph has no event-record nodes");
    graph_timing_check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    graph_timing_check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");  // one warm replay
    graph_timing_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    ev.assign(static_cast<std::size_t>(2 * iters), nullptr);
    for (cudaEvent_t& e : ev) graph_timing_check(cudaEventCreate(&e), "cudaEventCreate");
    for (int i = 0; i < iters; ++i) {
      graph_timing_check(cudaGraphExecEventRecordNodeSetEvent(exec, na, ev[2 * i]), "cudaGraphExecEventRecordNodeSetEvent");
      graph_timing_check(cudaGraphExecEventRecordNodeSetEvent(exec, nb, ev[2 * i + 1]),
                         "cudaGraphExecEventRecordNodeSetEvent");
      graph_timing_check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
    }
    graph_timing_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    std::vector<double> t;
    for (int i = 0; i < iters; ++i) {
      float ms = 0.f;
      graph_timing_check(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]), "cudaEventElapsedTime");
      t.push_back(1e3 * ms);
    }
    cleanup();
    std::sort(t.begin(), t.end());  // the median as the benches take it: the middle two averaged
    const std::size_t m = t.size();
    return m % 2 ? t[m / 2] : 0.5 * (t[m / 2 - 1] + t[m / 2]);
  } catch (...) {
    cleanup();
    throw;
  }
}

}  // namespace moekit_bench
