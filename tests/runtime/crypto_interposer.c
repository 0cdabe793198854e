/* A stand-in for a library that bundles its own crypto (TensorFlow's BoringSSL, grpc):
 * it exports OpenSSL's names, and each of them ends the process saying it was called.
 * Loaded before libhvdrun (LD_PRELOAD, or dlopen with RTLD_GLOBAL as Python's
 * `import tensorflow` does), it would take over any OpenSSL call libhvdrun resolved
 * dynamically: tests/runtime/api/interposition_test.cc runs jobs next to it. */
#include <stdio.h>
#include <stdlib.h>

#define INTERPOSE(name)                                                                \
  __attribute__((visibility("default"))) void name(void);                              \
  void name(void) {                                                                    \
    fprintf(stderr, "crypto_interposer: libhvdrun called the interposed " #name "\n"); \
    abort();                                                                           \
  }

INTERPOSE(EVP_Digest)
INTERPOSE(EVP_DigestInit_ex)
INTERPOSE(EVP_DigestUpdate)
INTERPOSE(EVP_DigestFinal_ex)
INTERPOSE(EVP_MD_CTX_new)
INTERPOSE(EVP_MD_CTX_free)
INTERPOSE(EVP_MD_CTX_copy_ex)
INTERPOSE(EVP_MD_fetch)
INTERPOSE(EVP_sha256)
INTERPOSE(HMAC)
INTERPOSE(HMAC_CTX_new)
INTERPOSE(HMAC_Init_ex)
INTERPOSE(HMAC_Update)
INTERPOSE(HMAC_Final)
INTERPOSE(SHA256)
INTERPOSE(SHA256_Init)
INTERPOSE(SHA256_Update)
INTERPOSE(SHA256_Final)
INTERPOSE(RAND_bytes)
INTERPOSE(CRYPTO_memcmp)
INTERPOSE(OPENSSL_cleanse)
