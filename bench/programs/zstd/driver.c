/* zstd workload: compresses the first `bytes` of a file at `level`, then
 * decompresses and verifies it. Built from the zstd C sources in the zstd-sys
 * crate. usage: zstd-bench FILE [bytes] [level] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "zstd.h"

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE [bytes] [level]\n", argv[0]);
        return 2;
    }
    long want = argc > 2 ? strtol(argv[2], NULL, 10) : -1;
    int level = argc > 3 ? atoi(argv[3]) : 6;
    FILE *f = fopen(argv[1], "rb");
    if (!f) {
        perror(argv[1]);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (want < 0 || want > size)
        want = size;
    char *src = malloc((size_t)want);
    if (fread(src, 1, (size_t)want, f) != (size_t)want) {
        perror("read");
        return 1;
    }
    fclose(f);
    size_t cap = ZSTD_compressBound((size_t)want);
    char *dst = malloc(cap);
    char *back = malloc((size_t)want + 1);
    ZSTD_CCtx *cctx = ZSTD_createCCtx();
    size_t csize = ZSTD_compressCCtx(cctx, dst, cap, src, (size_t)want, level);
    if (ZSTD_isError(csize)) {
        fprintf(stderr, "compress: %s\n", ZSTD_getErrorName(csize));
        return 1;
    }
    ZSTD_DCtx *dctx = ZSTD_createDCtx();
    size_t dsize = ZSTD_decompressDCtx(dctx, back, (size_t)want + 1, dst, csize);
    if (ZSTD_isError(dsize) || dsize != (size_t)want || memcmp(src, back, dsize) != 0) {
        fprintf(stderr, "round trip failed\n");
        return 1;
    }
    unsigned long check = 0;
    for (size_t i = 0; i < csize; i += 61)
        check = check * 131 + (unsigned char)dst[i];
    printf("zstd bytes=%ld level=%d compressed=%zu checksum=%lu\n", want, level, csize, check);
    ZSTD_freeCCtx(cctx);
    ZSTD_freeDCtx(dctx);
    free(src);
    free(dst);
    free(back);
    return 0;
}
