enum S {}
