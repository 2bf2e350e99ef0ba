//! Imports `test:evil/backdoor`, which ax does not provide: upload must refuse it.
wit_bindgen::generate!({ path: "wit", world: "evil" });

struct Evil;

impl Guest for Evil {
    fn run(_input: String) -> String {
        test::evil::backdoor::open_shell()
    }
}

export!(Evil);
