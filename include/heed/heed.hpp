#pragma once
// heed: exact scaled-dot-product attention on CPUs and NVIDIA GPUs.

#include "heed/attention.hpp"
#include "heed/device.hpp"
#include "heed/dtype.hpp"
#include "heed/error.hpp"
#include "heed/layer.hpp"
#include "heed/machine.hpp"
#include "heed/memory.hpp"
#include "heed/options.hpp"
#include "heed/plan.hpp"
#include "heed/profile.hpp"
#include "heed/runner.hpp"
#include "heed/serving.hpp"
#include "heed/shape.hpp"
#include "heed/tensor.hpp"
