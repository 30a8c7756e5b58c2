#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>
double run(bool bf){
  long iters=100000000;
  auto t0=std::chrono::steady_clock::now();
  if(bf){
    for(long it=0;it<iters;++it){
      __asm__ volatile(
        "vdpbf16ps %%zmm30,%%zmm31,%%zmm0\n vdpbf16ps %%zmm30,%%zmm31,%%zmm1\n vdpbf16ps %%zmm30,%%zmm31,%%zmm2\n vdpbf16ps %%zmm30,%%zmm31,%%zmm3\n"
        "vdpbf16ps %%zmm30,%%zmm31,%%zmm4\n vdpbf16ps %%zmm30,%%zmm31,%%zmm5\n vdpbf16ps %%zmm30,%%zmm31,%%zmm6\n vdpbf16ps %%zmm30,%%zmm31,%%zmm7\n"
        "vdpbf16ps %%zmm30,%%zmm31,%%zmm8\n vdpbf16ps %%zmm30,%%zmm31,%%zmm9\n vdpbf16ps %%zmm30,%%zmm31,%%zmm10\n vdpbf16ps %%zmm30,%%zmm31,%%zmm11\n"
        "vdpbf16ps %%zmm30,%%zmm31,%%zmm12\n vdpbf16ps %%zmm30,%%zmm31,%%zmm13\n vdpbf16ps %%zmm30,%%zmm31,%%zmm14\n vdpbf16ps %%zmm30,%%zmm31,%%zmm15\n"
        ::: "xmm0","xmm1","xmm2","xmm3","xmm4","xmm5","xmm6","xmm7","xmm8","xmm9","xmm10","xmm11","xmm12","xmm13","xmm14","xmm15");
    }
  } else {
    for(long it=0;it<iters;++it){
      __asm__ volatile(
        "vfmadd231ps %%zmm30,%%zmm31,%%zmm0\n vfmadd231ps %%zmm30,%%zmm31,%%zmm1\n vfmadd231ps %%zmm30,%%zmm31,%%zmm2\n vfmadd231ps %%zmm30,%%zmm31,%%zmm3\n"
        "vfmadd231ps %%zmm30,%%zmm31,%%zmm4\n vfmadd231ps %%zmm30,%%zmm31,%%zmm5\n vfmadd231ps %%zmm30,%%zmm31,%%zmm6\n vfmadd231ps %%zmm30,%%zmm31,%%zmm7\n"
        "vfmadd231ps %%zmm30,%%zmm31,%%zmm8\n vfmadd231ps %%zmm30,%%zmm31,%%zmm9\n vfmadd231ps %%zmm30,%%zmm31,%%zmm10\n vfmadd231ps %%zmm30,%%zmm31,%%zmm11\n"
        "vfmadd231ps %%zmm30,%%zmm31,%%zmm12\n vfmadd231ps %%zmm30,%%zmm31,%%zmm13\n vfmadd231ps %%zmm30,%%zmm31,%%zmm14\n vfmadd231ps %%zmm30,%%zmm31,%%zmm15\n"
        ::: "xmm0","xmm1","xmm2","xmm3","xmm4","xmm5","xmm6","xmm7","xmm8","xmm9","xmm10","xmm11","xmm12","xmm13","xmm14","xmm15");
    }
  }
  double s=std::chrono::duration<double>(std::chrono::steady_clock::now()-t0).count();
  return iters*16.0/s/1e9; // instr per ns
}
int main(){
  double b=run(true), f=run(false);
  printf("1 thread: vdpbf16ps %.2f/ns = %.0f GFLOP/s; fma %.2f/ns = %.0f GFLOP/s\n", b, b*64, f, f*32);
  std::vector<double> r(2); std::thread t([&]{r[1]=run(true);}); r[0]=run(true); t.join();
  printf("2 threads: vdpbf16ps %.0f + %.0f GFLOP/s\n", r[0]*64, r[1]*64);
}
