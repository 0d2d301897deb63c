// The whole public API of moekit: include this one header.
#pragma once

#include "moekit/checkpoint.hpp"
#include "moekit/error.hpp"
#include "moekit/faults.hpp"
#include "moekit/ops.hpp"
#include "moekit/parallel.hpp"
#include "moekit/presets.hpp"
#include "moekit/problem.hpp"
#include "moekit/quant.hpp"
#include "moekit/rope_quant.hpp"
#include "moekit/tensor.hpp"
#include "moekit/version.hpp"
