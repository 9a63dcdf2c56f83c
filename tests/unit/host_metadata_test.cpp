// Host-resident metadata of a CUDA call (call/metadata.hpp): validation counts it, the CUDA plan
// lays out its device copy as a named buffer at the end of the scratch, and the packed copy reads
// as the original (a strided block table row-major). Host code only: no GPU needed.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "call/metadata.hpp"
#include "call/validate.hpp"
#include "heed/heed.hpp"
#include "plan/cuda_plan.hpp"
#include "support/serving.hpp"

namespace heed::test {
namespace {

plan::CudaDeviceInfo h200() {
  plan::CudaDeviceInfo info;
  info.sm_count = 132;
  info.major = 9;
  info.shared_per_block = 227 << 10;
  info.name = "NVIDIA H200";
  return info;
}

// Views of a paged decode on cuda:0 (never dereferenced here), metadata on the host.
struct PagedOnCuda {
  std::vector<std::uint16_t> storage = std::vector<std::uint16_t>(1 << 16);
  TensorView q{storage.data(), DType::Float16, Shape{2, 4, 64}, Device::cuda(0)};
  TensorView cache{storage.data(), DType::Float16, Shape{6, 16, 1, 64}, Device::cuda(0)};
  TensorView out{storage.data(), DType::Float16, Shape{2, 4, 64}, Device::cuda(0)};
  IntTensor table{Shape{2, 3}, {4, 1, 0, 5, 2, 3}, 2};  // rows 5 entries apart
  IntTensor lengths{Shape{2}, {40, 33}};

  call::Call validate(bool table_on_host) {
    TensorView table_view = table.view();
    if (!table_on_host) table_view.device = Device::cuda(0);
    return call::validate_paged(q, cache, cache, PagedKv{table_view, lengths.view(), {}, {}, 48}, &out, 1.0f, {});
  }
};

TEST(HostMetadata, TheCudaPlanCopiesItIntoANamedBuffer) {
  PagedOnCuda call;
  const call::Call c = call.validate(true);
  EXPECT_EQ(c.host_metadata, 2 * 3 + 2);
  const plan::CudaRoute r = plan::plan_cuda(c, h200());
  const auto buffer = std::find_if(r.plan.buffers.begin(), r.plan.buffers.end(),
                                   [](const ScratchBuffer& b) { return b.name == "metadata"; });
  ASSERT_NE(buffer, r.plan.buffers.end()) << r.plan.explain();
  EXPECT_GE(buffer->bytes, 8 * sizeof(std::int32_t));
  EXPECT_EQ(buffer->offset + buffer->bytes, r.plan.scratch_bytes);
  EXPECT_EQ(r.metadata.offset, buffer->offset);
  EXPECT_NE(r.plan.explain().find("metadata: 8 int32 values on the host"), std::string::npos) << r.plan.explain();

  // Only the lengths on the host: two values; all on the device (or the call on the CPU): none.
  EXPECT_EQ(call.validate(false).host_metadata, 2);
  TensorView table = call.table.view(), lengths = call.lengths.view();
  table.device = lengths.device = Device::cuda(0);
  EXPECT_EQ(call::validate_paged(call.q, call.cache, call.cache, PagedKv{table, lengths, {}, {}, 48}, &call.out, 1.0f, {})
                .host_metadata,
            0);
}

TEST(HostMetadata, ThePackedCopyReadsAsTheOriginal) {
  PagedOnCuda call;
  const call::Call c = call.validate(true);
  std::vector<std::int32_t> packed(static_cast<std::size_t>(c.host_metadata));
  call::pack_host_metadata(c, packed.data());
  EXPECT_EQ(packed, (std::vector<std::int32_t>{40, 33, 4, 1, 0, 5, 2, 3}));
  const call::Call copy = call::with_metadata_copy(c, packed.data());
  EXPECT_EQ(copy.seqs.host, call::Sequences::HostArrays{});
  for (std::int64_t b = 0; b < 2; ++b) {
    const call::Sequence original = call::sequence(c, b), copied = call::sequence(copy, b);
    EXPECT_EQ(copied.kv_len, original.kv_len);
    for (std::int64_t j = 0; j < 48; j += 16) {
      EXPECT_EQ(call::key_offset(copy, copy.k_strides, copied, 0, j), call::key_offset(c, c.k_strides, original, 0, j));
    }
  }
}

}  // namespace
}  // namespace heed::test
