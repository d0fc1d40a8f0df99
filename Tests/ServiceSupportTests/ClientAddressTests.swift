import ServiceSupport
import Testing

/// What per-address limits count: IPv4 as it is, IPv6 by its /64 however it is written, IPv4 written in IPv6 as IPv4.
@Suite struct ClientAddressTests {
    @Test func ipv6CountsByItsSlash64AndIPv4AsItIs() {
        #expect(ClientAddress.limitKey("203.0.113.9") == "203.0.113.9")
        #expect(ClientAddress.limitKey("2001:db8:1:2::1") == "2001:db8:1:2::/64")
        #expect(ClientAddress.limitKey("2001:0DB8:0001:0002:ffff:ffff:ffff:fffe") == "2001:db8:1:2::/64", "any spelling, any host part")
        #expect(ClientAddress.limitKey("2001:db8:1:3::1") == "2001:db8:1:3::/64")
        #expect(ClientAddress.limitKey("::ffff:198.51.100.7") == "198.51.100.7")
        #expect(ClientAddress.limitKey("::1") == "0:0:0:0::/64")
        #expect(ClientAddress.limitKey("unknown") == "unknown")
        #expect(ClientAddress.limitKey("2001:db8:1:2::/64") == "2001:db8:1:2::/64", "a key given again stays the same")
    }
}
