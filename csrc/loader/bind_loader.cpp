#include <nanobind/nanobind.h>
namespace nb = nanobind;
void bind_loader(nb::module_& m) { (void)m; }
