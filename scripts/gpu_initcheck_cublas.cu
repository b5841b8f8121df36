// Does compute-sanitizer's initcheck see what a cuBLAS GEMM writes? C is written only by
// cublasGemmEx, then a kernel reads it and the sum is checked. On an H100 with CUDA 13.0 every
// read is reported as uninitialized although the sum is right, so scripts/gpu_check.sh runs
// this first and, when it is reported, leaves out of initcheck the one llmquant kernel that
// reads cuBLAS output (k_bias_round). Exit status: 0 right sum, 1 wrong sum.
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cstdio>
#include <cstdlib>
__global__ void k_read(const float *c, int n, float *sum) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(sum, c[i]);
}
__global__ void k_fill(__half *a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] = __float2half(1.f);
}
int main(int argc, char **argv) {
    int m = argc > 1 ? atoi(argv[1]) : 118, n = 128, k = 256;
    __half *a, *b; float *c, *s;
    cudaMalloc(&a, n * k * 2); cudaMalloc(&b, m * k * 2); cudaMalloc(&c, m * n * 4); cudaMalloc(&s, 4);
    cudaMemset(s, 0, 4);
    k_fill<<<(n * k + 255) / 256, 256>>>(a, n * k);
    k_fill<<<(m * k + 255) / 256, 256>>>(b, m * k);
    cublasHandle_t h; cublasCreate(&h);
    float al = 1, be = 0;
    cublasStatus_t st = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &al, a, CUDA_R_16F, k, b, CUDA_R_16F, k, &be, c, CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    k_read<<<(m * n + 255) / 256, 256>>>(c, m * n, s);
    float hs; cudaMemcpy(&hs, s, 4, cudaMemcpyDeviceToHost);
    printf("gemm status %d, sum %.0f (expect %.0f)\n", (int)st, hs, (double)m * n * k);
    return st == CUBLAS_STATUS_SUCCESS && hs == (float)((double)m * n * k) ? 0 : 1;
}
