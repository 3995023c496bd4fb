"""@rules_java for an offline Bazel 4: the rule names @bazel_tools loads, bound to Bazel's native rules.

Bazel 4 registers its JDK toolchains (@bazel_tools//tools/jdk:all) for every build, and that package
loads @rules_java//java:defs.bzl, a repository Bazel would download; at Bazel 4 upstream rules_java
was the same thin layer over the native rules.
"""

java_binary = native.java_binary
java_import = native.java_import
java_library = native.java_library
java_runtime = native.java_runtime
java_toolchain = native.java_toolchain
