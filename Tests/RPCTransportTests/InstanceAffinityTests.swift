import Testing

@testable import RPCTransport

/// Rendezvous hashing of affinity keys over a service's instances (pure).
@Suite struct InstanceAffinityTests {
    static let addresses = ["10.0.0.5:7104", "10.0.0.6:7104", "10.0.0.7:7104"]
    static let keys = (0..<3000).map { "session-\($0)" }

    static func firsts(_ addresses: [String]) -> [String: String] {
        let seeds = addresses.map(InstanceAffinity.seed(address:))
        return Dictionary(uniqueKeysWithValues: keys.map { ($0, addresses[InstanceAffinity.ranked(key: $0, seeds: seeds)[0]]) })
    }

    @Test func everyInstanceIsRankedOnceAndKeysSpreadEvenly() {
        let seeds = Self.addresses.map(InstanceAffinity.seed(address:))
        for key in Self.keys.prefix(100) { #expect(InstanceAffinity.ranked(key: key, seeds: seeds).sorted() == [0, 1, 2]) }
        var counts: [String: Int] = [:]
        for (_, address) in Self.firsts(Self.addresses) { counts[address, default: 0] += 1 }
        #expect(counts.count == 3)
        #expect(counts.values.allSatisfy { (850...1150).contains($0) }, "\(counts)")
    }

    @Test func clientsListingTheInstancesInAnotherOrderAgree() {
        #expect(Self.firsts(Self.addresses) == Self.firsts(Self.addresses.reversed()))
    }

    /// An instance taken out moves only its own keys, each to its second choice.
    @Test func removingAnInstanceMovesOnlyItsKeys() {
        let before = Self.firsts(Self.addresses)
        let after = Self.firsts(Self.addresses.filter { $0 != "10.0.0.6:7104" })
        for key in Self.keys where before[key] != "10.0.0.6:7104" { #expect(after[key] == before[key]) }
        let moved = Self.keys.filter { before[$0] == "10.0.0.6:7104" }
        #expect(Set(moved.map { after[$0]! }) == ["10.0.0.5:7104", "10.0.0.7:7104"])
    }
}
