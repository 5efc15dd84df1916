{
  "targets": [
    {
      "target_name": "prefix_router",
      "sources": [
        "native/addon.cc",
        "native/bind_exact.cc",
        "native/bind_hash.cc",
        "native/bind_info.cc",
        "native/bind_key.cc",
        "native/bind_pick.cc",
        "native/bind_router.cc",
        "native/exact_index.cc",
        "native/key/json_scan.cc",
        "native/key/openai_key.cc",
        "native/napi_throw.cc",
        "native/prefix_index.cc",
        "native/ring.cc",
        "native/router.cc",
        "<!@(node -p \"require('fs').readdirSync('native/strategy').filter((f) => f.endsWith('.cc')).sort().map((f) => 'native/strategy/' + f).join(' ')\")",
        "native/xxh3.cc"
      ],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
      "defines": [
        "NAPI_VERSION=8",
        "NAPI_DISABLE_CPP_EXCEPTIONS",
        "NODE_ADDON_API_DISABLE_DEPRECATED",
        "PR_SOURCES_HASH=\"<!(node scripts/native-sources-hash.cjs)\""
      ],
      "cflags": ["-fvisibility=hidden"],
      "cflags_cc": ["-fvisibility=hidden", "-fvisibility-inlines-hidden", "-fno-exceptions", "-std=c++17"],
      "configurations": {
        "Release": {
          "cflags": ["-O3"],
          "cflags_cc": ["-O3"]
        }
      },
      "xcode_settings": {
        "GCC_SYMBOLS_PRIVATE_EXTERN": "YES",
        "GCC_OPTIMIZATION_LEVEL": "3",
        "CLANG_CXX_LANGUAGE_STANDARD": "c++17"
      },
      "msvs_settings": { "VCCLCompilerTool": { "ExceptionHandling": 0, "Optimization": 2 } }
    }
  ]
}
