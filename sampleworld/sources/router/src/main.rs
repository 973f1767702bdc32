// Sample vllm-router: no dependencies, so Debian's cargo builds it offline.
use std::env;
use std::process;

const HELP: &str = "vllm-router (sample)

Usage: vllm-router [OPTIONS]

Options:
      --host <HOST>                 Address to listen on [default: 0.0.0.0]
      --port <PORT>                 Port to listen on [default: 8000]
      --policy <POLICY>             Routing policy: round_robin | dp_rank_round_robin
      --service-discovery <KIND>    Worker discovery: static | moriio
      --moriio-port <PORT>          MoRIIO discovery port [default: 36367]
  -h, --help                        Print help
  -V, --version                     Print version
";

fn main() {
    let args: Vec<String> = env::args().skip(1).collect();
    for arg in &args {
        match arg.as_str() {
            "-h" | "--help" => {
                print!("{}", HELP);
                return;
            }
            "-V" | "--version" => {
                println!("vllm-router {}", env!("CARGO_PKG_VERSION"));
                return;
            }
            _ => {}
        }
    }
    eprintln!("sample vllm-router: serving is not implemented; try --help");
    process::exit(2);
}
