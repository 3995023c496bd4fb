"""@rules_cc for an offline Bazel 4: the rule names @bazel_tools loads, bound to Bazel's native rules.

Bazel 4's own C++ toolchain package (which every py_* target resolves) loads @rules_cc//cc:defs.bzl,
and Bazel would download that repository; at Bazel 4 upstream rules_cc was the same thin layer over
the native rules. Debian's bazel-rules-cc 0.0.4 needs Bazel >= 5 (use_cpp_toolchain).
"""

cc_binary = native.cc_binary
cc_library = native.cc_library
cc_proto_library = native.cc_proto_library
cc_test = native.cc_test
cc_toolchain = native.cc_toolchain
cc_toolchain_suite = native.cc_toolchain_suite
objc_library = native.objc_library
