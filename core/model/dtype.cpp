#include "model/dtype.h"

#include <array>
#include <utility>

namespace mosaic {
namespace {
struct Row { DType d; std::string_view name; std::size_t size; bool floating; };
constexpr std::array<Row, 10> kTable{{
    {DType::BF16, "BF16", 2, true}, {DType::F16, "F16", 2, true},  {DType::F32, "F32", 4, true},
    {DType::F64, "F64", 8, true},   {DType::I64, "I64", 8, false}, {DType::I32, "I32", 4, false},
    {DType::I16, "I16", 2, false},  {DType::I8, "I8", 1, false},   {DType::U8, "U8", 1, false},
    {DType::BOOL, "BOOL", 1, false},
}};
const Row& row(DType d) { return kTable[static_cast<std::size_t>(d)]; }
}  // namespace

std::optional<DType> parse_dtype(std::string_view name) {
  for (const Row& r : kTable)
    if (r.name == name) return r.d;
  return std::nullopt;
}
std::string_view dtype_name(DType d) { return row(d).name; }
std::size_t dtype_size(DType d) { return row(d).size; }
bool is_floating(DType d) { return row(d).floating; }

}  // namespace mosaic
