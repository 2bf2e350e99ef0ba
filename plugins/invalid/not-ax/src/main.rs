fn main() {
    println!("I am a WASI command, not an ax plugin");
}
