#pragma once
// Advice that a large buffer read in scattered slices be backed by 2 MiB pages: each slice then costs
// no page walk of its own. Only advice: where transparent huge pages are off (or "never"), nothing
// changes; pages already touched stay as they are until the kernel collapses them.
#include <cstddef>

namespace mosaic {

// The whole 2 MiB pages inside [data, data + bytes).
void advise_huge_pages(void* data, std::size_t bytes);

}  // namespace mosaic
