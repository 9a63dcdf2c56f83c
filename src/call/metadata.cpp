#include "call/metadata.hpp"

#include <utility>

namespace heed::call {
namespace {

std::int64_t cu_count(const Call& c) { return c.batch + 1; }
std::int64_t table_count(const Call& c) { return c.batch * c.seqs.max_pages; }

}  // namespace

std::int64_t host_metadata_count(const Call& c) {
  const Sequences::HostArrays& host = c.seqs.host;
  return (host.cu_q ? cu_count(c) : 0) + (host.cu_k ? cu_count(c) : 0) + (host.seqlens_k ? c.batch : 0) +
         (host.block_table ? table_count(c) : 0);
}

void pack_host_metadata(const Call& c, std::int32_t* packed) {
  const Sequences& s = c.seqs;
  const auto copy = [&](const std::int32_t* from, std::int64_t count) {
    for (std::int64_t i = 0; i < count; ++i) *packed++ = from[i];
  };
  if (s.host.cu_q) copy(s.cu_q, cu_count(c));
  if (s.host.cu_k) copy(s.cu_k, cu_count(c));
  if (s.host.seqlens_k) copy(s.seqlens_k, c.batch);
  if (s.host.block_table) {
    for (std::int64_t b = 0; b < c.batch; ++b) {
      for (std::int64_t j = 0; j < s.max_pages; ++j) *packed++ = s.block_table[b * s.table_strides[0] + j * s.table_strides[1]];
    }
  }
}

Call with_metadata_copy(const Call& c, const std::int32_t* copy) {
  Call d = c;
  Sequences& s = d.seqs;
  if (s.host.cu_q) s.cu_q = std::exchange(copy, copy + cu_count(c));
  if (s.host.cu_k) s.cu_k = std::exchange(copy, copy + cu_count(c));
  if (s.host.seqlens_k) s.seqlens_k = std::exchange(copy, copy + c.batch);
  if (s.host.block_table) {
    s.block_table = copy;
    s.table_strides[0] = s.max_pages;
    s.table_strides[1] = 1;
  }
  s.host = {};
  return d;
}

}  // namespace heed::call
