#include <nanobind/nanobind.h>
namespace nb = nanobind;
void bind_probe(nb::module_& m) { (void)m; }
