/// Which instance of a service a call with an affinity key goes to: rendezvous (highest random weight) hashing.
///
/// Every instance gets a weight from the key and its own address; the call goes to the heaviest one in service.
/// So calls with the same key keep going to the same instance (its per-account memory, such as fulfillment's known
/// wallets, stays right), keys spread evenly, every client with the same instances agrees whatever order they are
/// listed in, and when an instance is taken out only its own keys move (to their second choice), and back when it
/// returns.
package enum InstanceAffinity {
    /// An instance's seed: FNV-1a of its address, so the ranking depends on the addresses, not on their order.
    package static func seed(address: String) -> UInt64 {
        fnv(address.utf8)
    }

    /// Indices of `seeds`, the key's first choice first.
    package static func ranked(key: String, seeds: [UInt64]) -> [Int] {
        let hashed = fnv(key.utf8)
        let weights = seeds.map { mix($0 ^ hashed) }
        return seeds.indices.sorted { weights[$0] != weights[$1] ? weights[$0] > weights[$1] : $0 < $1 }
    }

    private static func fnv(_ bytes: some Sequence<UInt8>) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in bytes { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
        return hash
    }

    /// splitmix64's finalizer: FNV's low bits mix poorly, and the weights must look independent per instance.
    private static func mix(_ value: UInt64) -> UInt64 {
        var z = value &+ 0x9e37_79b9_7f4a_7c15
        z = (z ^ (z >> 30)) &* 0xbf58_476d_1ce4_e5b9
        z = (z ^ (z >> 27)) &* 0x94d0_49bb_1331_11eb
        return z ^ (z >> 31)
    }
}
